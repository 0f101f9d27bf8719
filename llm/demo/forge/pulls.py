"""Pull (merge) requests on the fake forge: GitHub's and Gitea's ``/repos/{o}/{r}/pulls``,
GitLab's ``/projects/:id/merge_requests``; a new one's head and base must exist in the
repository's bare git dir (when it has one), a second open one for the same head is
refused (422 GitHub, 409 GitLab and Gitea); ``/_control/state`` merges or closes one as a
person would and delivers the event."""

from __future__ import annotations

import subprocess
from typing import Any

from . import issues
from .answers import Answer, ForgeRequest, control_answer, forbidden, not_found, signed_delivery
from .mergeability import mergeable_fields
from .state import FakePull, FakeRepository, ForgeState, now_stamp


def github_pull(forge: ForgeState, kind: str, repository: str, pull: FakePull) -> dict[str, Any]:
    return {
        "number": pull.number,
        "html_url": forge.html_url(kind, repository, pull.number),
        "state": "open" if pull.state == "open" else "closed",
        "merged": pull.state == "merged",
        "updated_at": pull.updated_at,
        "title": pull.title,
        "body": pull.body,
        "head": {"ref": pull.head, "repo": {"full_name": repository}},
        "base": {"ref": pull.base},
        **mergeable_fields(forge, kind, repository, pull),
    }


def gitlab_mr(forge: ForgeState, repository: str, pull: FakePull) -> dict[str, Any]:
    return {
        "iid": pull.number,
        "web_url": forge.html_url("gitlab", repository, pull.number),
        "state": {"open": "opened"}.get(pull.state, pull.state),
        "title": pull.title,
        "description": pull.body,
        "source_branch": pull.head,
        "source_project_id": 1,
        "target_project_id": 1,
        "target_branch": pull.base,
        "updated_at": pull.updated_at,
        **mergeable_fields(forge, "gitlab", repository, pull),
    }


def pull_answer(forge: ForgeState, kind: str, repository: str, pull: FakePull) -> dict[str, Any]:
    if kind == "gitlab":
        return gitlab_mr(forge, repository, pull)
    return github_pull(forge, kind, repository, pull)


def set_state(forge: ForgeState, repository: str, number: int, state: str) -> FakePull:
    pull = forge.repositories[repository].pulls[number]
    pull.state = state
    pull.updated_at = now_stamp()
    if state == "merged":  # as the forges do: "Closes #N" in its body closes issue N
        pull.closed_issues = issues.close_referenced(forge, forge.repositories[repository], pull)
    return pull


def state_payload(forge: ForgeState, kind: str, repository: str, number: int) -> tuple[str, dict[str, Any]]:
    """The event name and payload the forge sends when a pull request changes."""
    pull = forge.repositories[repository].pulls[number]
    if kind == "gitlab":
        attributes = {
            "iid": number,
            "state": {"open": "opened"}.get(pull.state, pull.state),
            "url": forge.html_url(kind, repository, number),
            "updated_at": pull.updated_at,
        }
        payload = {
            "object_kind": "merge_request",
            "project": {"path_with_namespace": repository},
            "object_attributes": attributes,
        }
        return "Merge Request Hook", payload
    return "pull_request", {
        "action": "closed" if pull.state != "open" else "opened",
        "number": number,
        "pull_request": github_pull(forge, kind, repository, pull),
        "repository": {"full_name": repository},
    }


def state_delivery(
    forge: ForgeState, kind: str, repository: str, number: int, secret: str
) -> tuple[bytes, dict[str, str]]:
    event, payload = state_payload(forge, kind, repository, number)
    return signed_delivery(kind, event, payload, secret)


def _get(request: ForgeRequest) -> Answer:
    assert request.repository is not None
    pull = request.repository.pulls.get(int(request.match["number"]))
    if pull is None:
        return not_found(request.kind)
    return 200, pull_answer(request.forge, request.kind, request.repository.name, pull)


def _list(request: ForgeRequest) -> Answer:
    """Open (or all) pull requests, filtered as each forge filters: GitHub by
    ``head=owner:branch``, GitLab by ``source_branch``; Gitea not by head."""
    repository, kind, query = request.repository, request.kind, request.query
    assert repository is not None
    wanted_state = query.get("state", "opened" if kind == "gitlab" else "open")
    pulls = list(repository.pulls.values())
    if wanted_state in ("open", "opened"):
        pulls = [p for p in pulls if p.state == "open"]
    if kind == "github" and "head" in query:
        pulls = [p for p in pulls if f"{repository.name.split('/')[0]}:{p.head}" == query["head"]]
    if kind == "gitlab" and "source_branch" in query:
        pulls = [p for p in pulls if p.head == query["source_branch"]]
    return 200, [pull_answer(request.forge, kind, repository.name, pull) for pull in reversed(pulls)]


def open_by_hand(forge: ForgeState, repository: str, head: str, base: str, title: str) -> FakePull:
    """A person opens a pull request on the forge (no check of the branches)."""
    pulls = forge.repositories[repository].pulls
    # As on GitHub and Gitea, issues and pull requests share their numbers.
    number = max([*pulls, *forge.repositories[repository].issues], default=0) + 1
    pulls[number] = FakePull(number=number, head=head, base=base, title=title, body="Opened by hand.")
    return pulls[number]


def _create(request: ForgeRequest) -> Answer:
    repository, kind, body = request.repository, request.kind, request.body
    assert repository is not None
    if not request.may_write:
        return forbidden(kind)
    if kind == "gitlab":
        head, base, text = body.get("source_branch", ""), body.get("target_branch", ""), body.get("description", "")
    else:
        head, base, text = body.get("head", ""), body.get("base", ""), body.get("body", "")
    problem = _check_new(repository, head, base, body.get("title", ""))
    if problem:
        if kind == "github":
            return 422, {"message": "Validation Failed", "errors": [{"message": problem}]}
        if kind == "gitlab":
            return (409 if "already exists" in problem else 422), {"message": [problem]}
        return 409 if "already exists" in problem else 422, {"message": problem}
    number = max([*repository.pulls, *repository.issues], default=0) + 1
    repository.pulls[number] = FakePull(number=number, head=head, base=base, title=body["title"], body=text)
    return 201, pull_answer(request.forge, kind, repository.name, repository.pulls[number])


def _check_new(repository: FakeRepository, head: str, base: str, title: str) -> str:
    if not head or not base or not title:
        return "head, base and title are required"
    if repository.git_dir is not None:
        for branch in (head, base):
            # The server's storage account owns the remote once it has pushed there:
            # git would call it "dubious" and answer as if the branch were missing.
            trusted = f"safe.directory={repository.git_dir.resolve()}"
            found = subprocess.run(  # noqa: S603
                ["git", "-c", trusted, "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],  # noqa: S607
                cwd=repository.git_dir,
                capture_output=True,
            )
            if found.returncode != 0:
                return f"branch {branch} does not exist on the remote"
    if any(p.head == head and p.state == "open" for p in repository.pulls.values()):
        return f"A pull request already exists for {head}."
    return ""


def control_state(forge: ForgeState, body: dict[str, Any]) -> Answer:
    """A person on the forge: set a pull request's state and, given a webhook URL and
    secret, deliver the signed event to it as the forge would."""
    try:
        kind, repository, number = str(body["kind"]), str(body["repository"]), int(body["number"])
        with forge.lock:
            pull = set_state(forge, repository, number, str(body["state"]))
            events = [state_payload(forge, kind, repository, number)]
            # The issues the merge closed are told too, each its own event.
            events += [
                issues.issue_event(forge, kind, repository, forge.repositories[repository].issues[closed], "closed")
                for closed in pull.closed_issues
            ]
    except (KeyError, TypeError, ValueError) as error:
        return 400, {"message": f"kind, repository, number and state are required ({error})"}
    return control_answer(body, kind, events, {"state": body["state"]})


GITHUB_PULLS = r"/repos/(?P<repo>[^/]+/[^/]+)/pulls"
GITLAB_MRS = r"/projects/(?P<repo>[^/]+)/merge_requests"

ROUTES = [
    ("github", "GET", GITHUB_PULLS + r"/(?P<number>\d+)", _get),
    ("github", "GET", GITHUB_PULLS, _list),
    ("github", "POST", GITHUB_PULLS, _create),
    ("gitlab", "GET", GITLAB_MRS + r"/(?P<number>\d+)", _get),
    ("gitlab", "GET", GITLAB_MRS, _list),
    ("gitlab", "POST", GITLAB_MRS, _create),
]
CONTROLS = {"/_control/state": control_state}
