"""CI on the fake forge: GitHub's check runs (``/repos/{o}/{r}/commits/{sha}/check-runs``)
and combined commit statuses (``…/commits/{ref}/status``, Gitea's too), an Actions job's
log (``/actions/jobs/{id}/logs``: a 302 to a download URL outside the API, served without
a token), GitLab's merge request pipelines, their jobs and job traces; merging a pull
request (GitHub ``PUT``, Gitea ``POST`` ``/pulls/{n}/merge``, GitLab ``PUT
/merge_requests/:iid/merge``). ``POST /_control/checks`` plays CI:

    {"kind", "repository", "sha" or "number", "checks": [{"name", "state", "log", "via"?}],
     "webhook"?, "secret"?}

sets the commit's checks (state pending|passed|failed; GitHub's ``via: "status"`` makes a
check a commit status instead of a check run) and delivers the event the forge would."""

from __future__ import annotations

import hashlib
import subprocess
from dataclasses import dataclass, field
from typing import Any

from .answers import Answer, ForgeRequest, Redirect, control_answer, not_found
from .pulls import set_state
from .state import FakeRepository, ForgeState, now_stamp


@dataclass
class FakeCheck:
    id: int
    name: str
    state: str  # pending, passed, failed
    log: str = ""
    via: str = "check"  # check (a check run / a GitLab job) or status (a commit status)


@dataclass
class FakeCI:
    checks: dict[tuple[str, str], list[FakeCheck]] = field(default_factory=dict)  # (repository, sha)
    pipelines: dict[tuple[str, str], int] = field(default_factory=dict)  # GitLab: a commit's pipeline id
    next_id: int = 100
    stamp: str = ""
    down: int = 0  # the next reads of CI answer 503 (CI's service is failing)
    merges_down: int = 0  # the next merges answer 503
    log_host: str = "localhost"  # where GitHub's job logs redirect to


def ci(forge: ForgeState) -> FakeCI:
    """The forge's CI state, kept on the forge itself."""
    found = getattr(forge, "_ci", None)
    if found is None:
        found = FakeCI()
        forge._ci = found  # type: ignore[attr-defined]
    return found


def head_sha(repository: FakeRepository, branch: str) -> str:
    if repository.git_dir is None:
        return ""
    trusted = f"safe.directory={repository.git_dir.resolve()}"
    found = subprocess.run(  # noqa: S603
        ["git", "-c", trusted, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],  # noqa: S607
        cwd=repository.git_dir,
        capture_output=True,
        text=True,
    )
    return found.stdout.strip()


_GITHUB_RUN = {
    "pending": ("in_progress", None),
    "passed": ("completed", "success"),
    "failed": ("completed", "failure"),
}
_STATUS = {"pending": "pending", "passed": "success", "failed": "failure"}
_GITLAB = {"pending": "running", "passed": "success", "failed": "failed"}


def _web(forge: ForgeState, kind: str, repository: str, what: str) -> str:
    return f"http://127.0.0.1:{forge.port}/{kind}-web/{repository}/{what}"


def _failing(forge: ForgeState) -> Answer | None:
    state = ci(forge)
    if state.down > 0:
        state.down -= 1
        return 503, {"message": "Service Unavailable"}
    return None


def _check_runs(request: ForgeRequest) -> Answer:
    if (failing := _failing(request.forge)) is not None:
        return failing
    if request.kind != "github":
        return not_found(request.kind)  # Gitea has commit statuses only
    assert request.repository is not None
    name = request.repository.name
    found = [c for c in ci(request.forge).checks.get((name, request.match["sha"]), []) if c.via == "check"]
    runs = []
    for check in found:
        status, conclusion = _GITHUB_RUN.get(check.state, ("queued", None))
        runs.append(
            {
                "id": check.id,
                "name": check.name,
                "head_sha": request.match["sha"],
                "status": status,
                "conclusion": conclusion,
                "html_url": _web(request.forge, "github", name, f"runs/{check.id}"),
                "details_url": _web(request.forge, "github", name, f"actions/runs/{check.id}"),
                "output": {"title": check.name, "summary": "", "text": None},
            }
        )
    return 200, {"total_count": len(runs), "check_runs": runs}


def _combined_status(request: ForgeRequest) -> Answer:
    if (failing := _failing(request.forge)) is not None:
        return failing
    assert request.repository is not None
    name, sha = request.repository.name, request.match["sha"]
    checks = ci(request.forge).checks.get((name, sha), [])
    found = [c for c in checks if c.via == "status" or request.kind == "gitea"]
    key = "status" if request.kind == "gitea" else "state"  # Gitea names each one's state "status"
    statuses = [
        {
            "id": check.id,
            key: _STATUS.get(check.state, "pending"),
            "context": check.name,
            "description": check.log.splitlines()[-1][:140] if check.log else "",
            "target_url": _web(request.forge, request.kind, name, f"builds/{check.id}"),
        }
        for check in found
    ]
    states = {s[key] for s in statuses}
    overall = "failure" if "failure" in states else "pending" if "pending" in states or not states else "success"
    return 200, {"state": overall, "sha": sha, "total_count": len(statuses), "statuses": statuses}


def _find(forge: ForgeState, name: str, check_id: int) -> FakeCheck | None:
    for (repository, _), checks in ci(forge).checks.items():
        for check in checks:
            if repository == name and check.id == check_id:
                return check
    return None


def _signature(check_id: int) -> str:
    return hashlib.sha256(f"fake-forge-log-{check_id}".encode()).hexdigest()[:16]


def _job_logs(request: ForgeRequest) -> Answer:
    assert request.repository is not None
    check = _find(request.forge, request.repository.name, int(request.match["job"]))
    if request.kind != "github" or check is None:
        return not_found(request.kind)
    # As GitHub does: a redirect to a short-lived URL on another host, which needs no token.
    host = ci(request.forge).log_host
    location = f"http://{host}:{request.forge.port}/_downloads/logs/{check.id}?sig={_signature(check.id)}"
    return 302, Redirect(location)


def download_log(forge: ForgeState, match: Any, query: dict[str, str]) -> Answer:
    check_id = int(match["job"])
    if query.get("sig") != _signature(check_id):
        return 403, {"message": "Signature mismatch"}
    for (_, _), checks in ci(forge).checks.items():
        for check in checks:
            if check.id == check_id:
                return 200, check.log
    return 404, {"message": "Not Found"}


def _mr_pipelines(request: ForgeRequest) -> Answer:
    if (failing := _failing(request.forge)) is not None:
        return failing
    assert request.repository is not None
    repository = request.repository
    pull = repository.pulls.get(int(request.match["number"]))
    if pull is None:
        return not_found("gitlab")
    state = ci(request.forge)
    answer = []
    for (name, sha), pipeline_id in sorted(state.pipelines.items(), key=lambda item: -item[1]):
        if name != repository.name:
            continue
        checks = state.checks.get((name, sha), [])
        states = {c.state for c in checks}
        status = "failed" if "failed" in states else "running" if "pending" in states else "success"
        answer.append(
            {
                "id": pipeline_id,
                "iid": pipeline_id,
                "sha": sha,
                "ref": pull.head,
                "status": status,
                "web_url": _web(request.forge, "gitlab", name, f"pipelines/{pipeline_id}"),
            }
        )
    return 200, answer


def _pipeline_jobs(request: ForgeRequest) -> Answer:
    assert request.repository is not None
    name, wanted = request.repository.name, int(request.match["pipeline"])
    state = ci(request.forge)
    for (repository, sha), pipeline_id in state.pipelines.items():
        if repository == name and pipeline_id == wanted:
            return 200, [
                {
                    "id": check.id,
                    "name": check.name,
                    "stage": "test",
                    "status": _GITLAB.get(check.state, "pending"),
                    "allow_failure": False,
                    "web_url": _web(request.forge, "gitlab", name, f"jobs/{check.id}"),
                }
                for check in state.checks.get((repository, sha), [])
            ]
    return not_found("gitlab")


def _job_trace(request: ForgeRequest) -> Answer:
    assert request.repository is not None
    check = _find(request.forge, request.repository.name, int(request.match["job"]))
    return (200, check.log) if check is not None else not_found("gitlab")


def _merge(request: ForgeRequest) -> Answer:
    repository, kind = request.repository, request.kind
    assert repository is not None
    if (kind, request.method) not in (("github", "PUT"), ("gitea", "POST"), ("gitlab", "PUT")):
        return 405, {"message": "Method Not Allowed"}
    if ci(request.forge).merges_down > 0:
        ci(request.forge).merges_down -= 1
        return 503, {"message": "Service Unavailable"}
    if not request.may_write:
        return 403, {"message": "403 Forbidden" if kind == "gitlab" else "Must have write access"}
    pull = repository.pulls.get(int(request.match["number"]))
    if pull is None:
        return not_found(kind)
    if pull.state != "open":
        return (405, {"message": "405 Method Not Allowed"}) if kind == "gitlab" else (405, {"message": "not open"})
    wanted = request.body.get("sha") or request.body.get("head_commit_id")
    head = head_sha(repository, pull.head)
    if wanted and head and wanted != head:
        return 409, {"message": "Head branch was modified. Review and try the merge again."}
    set_state(request.forge, repository.name, pull.number, "merged")
    if kind == "gitlab":
        return 200, {"iid": pull.number, "state": "merged", "sha": head}
    if kind == "gitea":
        return 200, None
    return 200, {"sha": head, "merged": True, "message": "Pull Request successfully merged"}


def _delivery(forge: ForgeState, kind: str, name: str, sha: str, number: int | None) -> tuple[str, dict[str, Any]]:
    """The event the forge sends as a commit's CI changes."""
    state = ci(forge)
    checks = state.checks[(name, sha)]
    states = {c.state for c in checks}
    overall = "failed" if "failed" in states else "pending" if "pending" in states else "passed"
    stamp = state.stamp
    if kind == "gitlab":
        return "Pipeline Hook", {
            "object_kind": "pipeline",
            "object_attributes": {
                "id": state.pipelines[(name, sha)],
                "sha": sha,
                "status": _GITLAB[overall],
                "finished_at": stamp,
            },
            "merge_request": {"iid": number} if number else None,
            "builds": [{"id": c.id, "name": c.name, "status": _GITLAB[c.state]} for c in checks],
            "project": {"path_with_namespace": name},
        }
    if kind == "gitea" or all(c.via == "status" for c in checks):
        last = checks[-1]
        return "status", {
            "sha": sha,
            "state": _STATUS[last.state],
            "context": last.name,
            "target_url": _web(forge, kind, name, f"builds/{last.id}"),
            "updated_at": stamp,
            "repository": {"full_name": name},
        }
    status, conclusion = _GITHUB_RUN[overall]
    return "check_suite", {
        "action": "completed" if status == "completed" else "requested",
        "check_suite": {"id": state.next_id, "head_sha": sha, "status": status, "conclusion": conclusion},
        "updated_at": stamp,
        "repository": {"full_name": name},
    }


def set_checks(
    forge: ForgeState,
    kind: str,
    name: str,
    checks: list[dict[str, Any]],
    *,
    sha: str = "",
    number: int | None = None,
) -> tuple[str, str, dict[str, Any]]:
    """CI reports on a commit (``sha``, or pull request ``number``'s head): its checks
    are now ``checks``. The commit, and the event name and payload the forge sends."""
    with forge.lock:
        repository = forge.repositories[name]
        if not sha and number is not None:
            sha = head_sha(repository, repository.pulls[number].head)
        if not sha:
            raise ValueError("no sha, and no pull request head to take it from")
        state = ci(forge)
        made = []
        for item in checks:
            state.next_id += 1
            made.append(
                FakeCheck(
                    id=state.next_id,
                    name=str(item["name"]),
                    state=str(item["state"]),
                    log=str(item.get("log", "")),
                    via=str(item.get("via", "check")),
                )
            )
        state.checks[(name, sha)] = made
        if (name, sha) not in state.pipelines:
            state.next_id += 1
            state.pipelines[(name, sha)] = state.next_id
        state.stamp = now_stamp()
        event, payload = _delivery(forge, kind, name, sha, number)
    return sha, event, payload


def control_checks(forge: ForgeState, body: dict[str, Any]) -> Answer:
    """CI on the forge: set a commit's checks and, given a webhook URL and secret,
    deliver the event as the forge would."""
    try:
        given = body["checks"]
        if not isinstance(given, list):
            raise TypeError("checks must be a list")
        number = int(body["number"]) if body.get("number") is not None else None
        kind = str(body["kind"])
        sha, event, payload = set_checks(
            forge, kind, str(body["repository"]), given, sha=str(body.get("sha") or ""), number=number
        )
    except (KeyError, TypeError, ValueError) as error:
        return 400, {"message": f"kind, repository, sha or number, and checks are required ({error})"}
    return control_answer(body, kind, [(event, payload)], {"sha": sha})


GITHUB_REPO = r"/repos/(?P<repo>[^/]+/[^/]+)"
GITLAB_PROJECT = r"/projects/(?P<repo>[^/]+)"

ROUTES = [
    ("github", "GET", GITHUB_REPO + r"/commits/(?P<sha>[^/]+)/check-runs", _check_runs),
    ("github", "GET", GITHUB_REPO + r"/commits/(?P<sha>[^/]+)/status", _combined_status),
    ("github", "GET", GITHUB_REPO + r"/actions/jobs/(?P<job>\d+)/logs", _job_logs),
    ("github", "PUT", GITHUB_REPO + r"/pulls/(?P<number>\d+)/merge", _merge),
    ("github", "POST", GITHUB_REPO + r"/pulls/(?P<number>\d+)/merge", _merge),
    ("gitlab", "GET", GITLAB_PROJECT + r"/merge_requests/(?P<number>\d+)/pipelines", _mr_pipelines),
    ("gitlab", "GET", GITLAB_PROJECT + r"/pipelines/(?P<pipeline>\d+)/jobs", _pipeline_jobs),
    ("gitlab", "GET", GITLAB_PROJECT + r"/jobs/(?P<job>\d+)/trace", _job_trace),
    ("gitlab", "PUT", GITLAB_PROJECT + r"/merge_requests/(?P<number>\d+)/merge", _merge),
]
CONTROLS = {"/_control/checks": control_checks}
DOWNLOADS = {r"/_downloads/logs/(?P<job>\d+)": download_log}
