"""A commit's CI on the forge — GitHub check runs and commit statuses, GitLab pipelines
and their jobs, Gitea/Forgejo commit statuses — as ``CheckRun``s, with the tail of a
failed job's log where the API gives it; and merging a pull request once they pass.

Everything read here is the forge's (untrusted) text: names and URLs bounded, logs cut
to their last ``LOG_TAIL_BYTES``. A GitHub job log answers with a redirect to a download
host: followed once, after the same address check as every call, without the token.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import httpx2

from .client import TIMEOUT_SECONDS, ForgeClient, GitLab
from .errors import ForgeError, ForgeKind
from .hosts import forge_host_check

logger = logging.getLogger(__name__)

PENDING, PASSED, FAILED = "pending", "passed", "failed"
LOG_TAIL_BYTES = 4096
LOG_TAIL_LINES = 60
NAME_MAX = 200
URL_MAX = 1000
FAILED_LOGS_READ = 5  # at most this many failed jobs' logs per reading

# GitHub check runs: status queued|in_progress|completed (+ waiting|requested|pending),
# then a conclusion. A neutral or skipped check does not block.
_GITHUB_CONCLUSIONS = {
    "success": PASSED,
    "neutral": PASSED,
    "skipped": PASSED,
    "failure": FAILED,
    "cancelled": FAILED,
    "timed_out": FAILED,
    "action_required": FAILED,
    "startup_failure": FAILED,
    "stale": PENDING,
}
# Commit statuses (GitHub; Gitea adds warning): error|failure|pending|success.
_STATUS_STATES = {"success": PASSED, "pending": PENDING, "failure": FAILED, "error": FAILED, "warning": PASSED}
# GitLab jobs and pipelines.
_GITLAB_STATES = {
    "success": PASSED,
    "skipped": PASSED,
    "manual": PASSED,  # waits for a person: not CI failing
    "failed": FAILED,
    "canceled": FAILED,
}


@dataclass(frozen=True)
class CheckRun:
    name: str
    state: str  # pending | passed | failed
    url: str = ""
    log_tail: str = ""


def log_tail(text: str | bytes) -> str:
    """The last lines of a job's log, at most LOG_TAIL_BYTES (cut at a line start)."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "replace")
    data = data[-LOG_TAIL_BYTES:]
    lines = data.decode("utf-8", "replace").splitlines()
    if len(data) == LOG_TAIL_BYTES and len(lines) > 1:
        lines = lines[1:]  # the first was cut in the middle
    return "\n".join(lines[-LOG_TAIL_LINES:])


def _bounded(value: Any, limit: int) -> str:
    return str(value or "")[:limit]


def _url(value: Any) -> str:
    url = _bounded(value, URL_MAX)
    return url if url.startswith(("https://", "http://")) else ""


# --- reading the checks


def checks_read(client: ForgeClient, *, sha: str, number: int | None = None) -> list[CheckRun]:
    """The checks of commit ``sha`` (the pull request ``number``'s head), failed ones with
    their log's tail where the forge has it. ForgeError when the forge fails."""
    if client.kind == ForgeKind.GITLAB:
        return _gitlab_checks(client, sha=sha, number=number)
    if client.kind == ForgeKind.GITHUB:
        return _github_checks(client, sha=sha)
    return _gitea_checks(client, sha=sha)


def _statuses(client: ForgeClient, sha: str) -> list[CheckRun]:
    """The combined status of a ref: GitHub and Gitea share the path; Gitea names each
    status's state ``status``."""
    found = []
    for status in client.call_pages(f"/repos/{client.repository}/commits/{sha}/status", key="statuses"):
        state = status.get("state") or status.get("status")
        found.append(
            CheckRun(
                name=_bounded(status.get("context") or "status", NAME_MAX),
                state=_STATUS_STATES.get(str(state), PENDING),
                url=_url(status.get("target_url")),
                log_tail=_bounded(status.get("description"), 300) if _STATUS_STATES.get(str(state)) == FAILED else "",
            )
        )
    return found


def _github_checks(client: ForgeClient, *, sha: str) -> list[CheckRun]:
    found: list[CheckRun] = []
    logs_read = 0
    for run in client.call_pages(f"/repos/{client.repository}/commits/{sha}/check-runs", key="check_runs"):
        if run.get("status") == "completed":
            state = _GITHUB_CONCLUSIONS.get(str(run.get("conclusion")), FAILED)
        else:
            state = PENDING
        tail = ""
        if state == FAILED:
            if logs_read < FAILED_LOGS_READ and isinstance(run.get("id"), int):
                logs_read += 1
                tail = _github_job_log(client, int(run["id"]))
            if not tail:  # not an Actions job (or its log is gone): what the check said
                output = run.get("output")
                output = output if isinstance(output, Mapping) else {}
                tail = log_tail(str(output.get("text") or output.get("summary") or ""))
        found.append(
            CheckRun(
                name=_bounded(run.get("name"), NAME_MAX),
                state=state,
                url=_url(run.get("html_url") or run.get("details_url")),
                log_tail=tail,
            )
        )
    return found + _statuses(client, sha)


def _gitea_checks(client: ForgeClient, *, sha: str) -> list[CheckRun]:
    return _statuses(client, sha)


def _gitlab_checks(client: ForgeClient, *, sha: str, number: int | None) -> list[CheckRun]:
    assert isinstance(client, GitLab)
    project = client._project()
    if number is not None:
        pipelines = client.call("GET", f"/projects/{project}/merge_requests/{number}/pipelines")
    else:
        pipelines = client.call("GET", f"/projects/{project}/pipelines", params={"sha": sha})
    ours = (
        [p for p in pipelines if isinstance(p, Mapping) and p.get("sha") == sha] if isinstance(pipelines, list) else []
    )
    if not ours:
        return []
    newest = max(ours, key=lambda p: int(p.get("id") or 0))
    found: list[CheckRun] = []
    logs_read = 0
    for job in client.call_pages(f"/projects/{project}/pipelines/{int(newest['id'])}/jobs"):
        state = _GITLAB_STATES.get(str(job.get("status")), PENDING)
        if state == FAILED and job.get("allow_failure"):
            state = PASSED
        tail = ""
        if state == FAILED and logs_read < FAILED_LOGS_READ and isinstance(job.get("id"), int):
            logs_read += 1
            tail = _job_log(client, client.api_url + f"/projects/{project}/jobs/{int(job['id'])}/trace")
        found.append(
            CheckRun(name=_bounded(job.get("name"), NAME_MAX), state=state, url=_url(job.get("web_url")), log_tail=tail)
        )
    return found


# --- logs: text, and GitHub's redirect


def _job_log(client: ForgeClient, url: str, *, redirects: int = 0) -> str:
    """A job's log's tail, or '' when the forge has none or it cannot be fetched now:
    the check is still named as failing, and its log is best effort."""
    try:
        return _log_tail_at(client, url, authorized=True, redirects=redirects)
    except ForgeError as error:
        logger.warning("A job's log on %s was not fetched: %s", client.kind.label, error.message)
        return ""


def _log_tail_at(client: ForgeClient, url: str, *, authorized: bool, redirects: int) -> str:
    """GET ``url``, streamed, keeping its last LOG_TAIL_BYTES. With ``redirects`` left,
    one redirect is followed — to a checked address, and never with the token (a
    download URL carries its own grant)."""
    pinned, host, extensions = client._pinned(url)
    headers = {**(client._auth_headers() if authorized else {}), "User-Agent": "AutoCoder", "Host": host}
    headers["Accept"] = "*/*"
    location = ""
    try:
        with (
            httpx2.Client(timeout=TIMEOUT_SECONDS, transport=client._transport, trust_env=False) as http,
            http.stream("GET", pinned, headers=headers, extensions=extensions) as response,
        ):
            if response.is_redirect and redirects > 0:
                location = response.headers.get("Location", "")
            elif response.status_code in (404, 410):
                return ""  # the log expired, or the check has none
            elif not response.is_success:
                response.read()
                raise client._error(response)
            else:
                tail = b""
                for chunk in response.iter_bytes():
                    tail = (tail + chunk)[-LOG_TAIL_BYTES:]
                return log_tail(tail)
    except httpx2.HTTPError:
        raise ForgeError(
            f"{client.kind.label} at {client.api_url} could not be reached for a job's log.",
            code="forge_unreachable",
            retryable=True,
        ) from None
    forge_host_check(location)  # the same check as every call's, before connecting anywhere
    return _log_tail_at(client, location, authorized=False, redirects=redirects - 1)


def _github_job_log(client: ForgeClient, job_id: int) -> str:
    """An Actions job's log: the API answers 302 to a short-lived download URL."""
    return _job_log(client, client.api_url + f"/repos/{client.repository}/actions/jobs/{job_id}/logs", redirects=1)


# --- merging


def pull_request_merge(client: ForgeClient, *, number: int, sha: str) -> None:
    """Merge pull request ``number`` on the forge, only if its head is still ``sha``
    (what passed). ForgeError when the forge refuses (not mergeable, head moved) or fails."""
    if client.kind == ForgeKind.GITLAB:
        assert isinstance(client, GitLab)
        client.call("PUT", f"/projects/{client._project()}/merge_requests/{number}/merge", {"sha": sha})
    elif client.kind == ForgeKind.GITHUB:
        client.call("PUT", f"/repos/{client.repository}/pulls/{number}/merge", {"sha": sha, "merge_method": "merge"})
    else:
        client.call("POST", f"/repos/{client.repository}/pulls/{number}/merge", {"Do": "merge", "head_commit_id": sha})


# --- webhooks


def webhook_checks_sha(*, kind: str, event: str, payload: Mapping[str, Any]) -> str | None:
    """The commit a CI delivery is about (GitHub ``check_run``/``check_suite``/``status``,
    GitLab ``pipeline``, Gitea/Forgejo ``status``), or None for another delivery."""
    value: Any = None
    if kind == ForgeKind.GITLAB:
        if event == "pipeline" and isinstance(payload.get("object_attributes"), Mapping):
            value = payload["object_attributes"].get("sha")
    elif event in ("check_run", "check_suite") and kind == ForgeKind.GITHUB:
        inner = payload.get(event)
        value = inner.get("head_sha") if isinstance(inner, Mapping) else None
    elif event == "status":
        value = payload.get("sha")
    if not isinstance(value, str) or not value or len(value) > 64 or not value.isalnum():
        return None
    return value
