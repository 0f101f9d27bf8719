"""Bad input on the HTML pages: every form the templates post, query strings and path keys.
A NUL (which PostgreSQL text cannot hold), a lone surrogate's bytes, or an id past the
64-bit range is a 400 or a 404 (or the form shown again with its errors), never a 500, and
a refused request writes nothing."""

from __future__ import annotations

from datetime import date
from urllib.parse import quote, urlencode

import pytest
from django.test import Client

from accounts.models import User
from memory.models import DailyLogEntry, Fact, Goal
from pipelines.models import PipelineRun, RunStatus
from projects.models import Project
from tasks.models import Task
from tests.api_helpers import db_snapshot
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

NUL = "a\x00b"
SURROGATE_BYTES = "%ED%A0%80"  # what a client sends for "\ud800": not UTF-8, decoded as U+FFFD
BAD_IDS = [str(2**63), str(-(2**63) - 1), str(10**30)]


@pytest.fixture
def ids(owner: User, project: Project) -> dict[str, int]:
    task = TaskFactory(project=project, title="Original")
    run = PipelineRun.objects.create(task=task, number=1, status=RunStatus.AWAITING_APPROVAL, model="m")
    entry = DailyLogEntry.objects.create(
        owner=owner, agent_id="coder", date=date(2026, 1, 1), session="run-1", type="t"
    )
    return {
        "project": project.pk,
        "task": task.pk,
        "run": run.pk,
        "fact": Fact.objects.create(user=owner, content="A fact").pk,
        "goal": Goal.objects.create(user=owner, text="A goal").pk,
        "entry": entry.pk,
    }


@pytest.fixture
def browser(client: Client, owner: User) -> Client:
    client.force_login(owner)
    return client


# Every form the templates post, with a body that is otherwise valid for it.
FORMS: dict[str, tuple[str, dict[str, str]]] = {
    "project-create": ("/projects/new", {"name": "P2", "description": "d", "llm_model": "", "token_budget": ""}),
    "project-edit": ("/projects/{project}/edit", {"name": "P", "description": "d", "llm_max_tokens": ""}),
    "repo-link": (
        "/projects/{project}/repository/link",
        {"path": "app", "base_branch": "", "merge_strategy": "merge", "test_command": ""},
    ),
    "repo-clone": (
        "/projects/{project}/repository/clone",
        {"url": "https://example.com/app.git", "base_branch": "", "merge_strategy": "merge", "test_command": ""},
    ),
    "repo-settings": (
        "/projects/{project}/repository/settings",
        {"base_branch": "main", "merge_strategy": "merge", "test_command": ""},
    ),
    "task-create": (
        "/tasks/new",
        {"title": "T", "description": "", "category": "feature", "priority": "medium", "project": "{project}"},
    ),
    "task-edit": ("/tasks/{task}", {"title": "T", "description": "", "category": "bug", "priority": "high"}),
    "task-move": ("/tasks/{task}/move", {"status": "spec", "position": "0", "next": "/"}),
    "pipeline-start": ("/tasks/{task}/pipeline/start", {"api_key": "sk-ant-x"}),
    "run-request-changes": ("/runs/{run}/request-changes", {"feedback": "More tests, please."}),
    "fact-create": ("/memory/facts", {"content": "Another fact", "project": ""}),
    "fact-edit": ("/memory/facts/{fact}/edit", {"content": "Edited fact", "project": "{project}"}),
    "goal-create": ("/memory/goals", {"text": "Another goal", "deadline": "", "project": ""}),
    "goal-edit": ("/memory/goals/{goal}/edit", {"text": "Edited goal", "deadline": "friday", "project": ""}),
    "recall-add": (
        "/memory/recall/add",
        {"content": "c", "memory_type": "note", "decay_policy": "reinforceable", "project": "", "q": ""},
    ),
    "notes-append": ("/memory/agents/coder/append", {"text": "A note.", "project": ""}),
    "notes-promote": ("/memory/agents/coder/promote/{entry}", {"date": "2026-01-01", "project": ""}),
    "chat": ("/chat/", {"text": "Hello", "project": "{project}"}),
    "login": ("/accounts/login", {"email": "alice@example.com", "password": "wrong password", "next": "/"}),
    "register": ("/accounts/register", {"email": "new@example.com", "password": "a long password"}),
    "password-change": (
        "/accounts/password",
        {
            "current_password": "wrong password",
            "new_password": "another long passphrase",
            "new_password_confirm": "another long passphrase",
        },
    ),
    "token-create": ("/accounts/tokens", {"name": "laptop"}),
}
ID_OR_CHOICE_FIELDS = {"category", "priority", "merge_strategy", "decay_policy", "status", "project"}


def _post(browser: Client, ids: dict[str, int], name: str, field: str, raw_value: str) -> object:
    """Post the form with ``field`` set to ``raw_value``, already percent-encoded."""
    path, fields = FORMS[name]
    body = urlencode({key: value.format(**ids) for key, value in fields.items() if key != field})
    body += f"&{field}={raw_value}"
    return browser.post(path.format(**ids), body, content_type="application/x-www-form-urlencoded")


@pytest.mark.parametrize("name", FORMS)
def test_a_nul_in_any_form_field_is_a_400_and_writes_nothing(browser: Client, ids: dict[str, int], name: str) -> None:
    before = db_snapshot()
    for field in FORMS[name][1]:
        response = _post(browser, ids, name, field, quote(NUL))
        assert response.status_code == 400, (field, response.content[:300])
        assert b"Null characters are not allowed." in response.content
    assert db_snapshot() == before


@pytest.mark.parametrize("name", [name for name, (_, fields) in FORMS.items() if ID_OR_CHOICE_FIELDS & set(fields)])
def test_a_surrogate_or_an_id_past_the_range_in_a_choice_or_id_field_is_refused(
    browser: Client, ids: dict[str, int], name: str
) -> None:
    # Settings without a linked repository send the user back to the repository page.
    refused = (302, 400, 404) if name == "repo-settings" else (400, 404)
    before = db_snapshot()
    for field in ID_OR_CHOICE_FIELDS & set(FORMS[name][1]):
        for raw_value in [SURROGATE_BYTES, *BAD_IDS]:
            response = _post(browser, ids, name, field, raw_value)
            assert response.status_code in refused, (field, raw_value, response.content[:300])
    assert db_snapshot() == before


@pytest.mark.parametrize("raw_value", BAD_IDS)
def test_a_position_past_the_range_is_refused_or_kept_within_the_column(
    browser: Client, ids: dict[str, int], raw_value: str
) -> None:
    response = _post(browser, ids, "task-move", "position", raw_value)
    assert response.status_code in (302, 400), response.content[:300]
    assert 0 <= Task.objects.get(pk=ids["task"]).position < 2**31


QUERIES = [
    "/?q={value}",
    "/?project={value}",
    "/?category={value}",
    "/chat/?project={value}",
    "/memory/recall?q={value}",
    "/memory/recall/results?q={value}&min_confidence={value}",
    "/memory/agents/coder/?date={value}",
    "/projects/{project}/repository?poll={value}",
]


@pytest.mark.parametrize("query", QUERIES)
def test_a_nul_in_a_query_string_is_a_400(browser: Client, ids: dict[str, int], query: str) -> None:
    response = browser.get(query.format(value=quote(NUL), **ids))
    assert response.status_code == 400
    assert b"Null characters are not allowed." in response.content


@pytest.mark.parametrize("query", QUERIES)
@pytest.mark.parametrize("raw_value", [SURROGATE_BYTES, *BAD_IDS], ids=["surrogate", "past-max", "past-min", "huge"])
def test_odd_values_in_a_query_string_never_fail(
    browser: Client, ids: dict[str, int], query: str, raw_value: str
) -> None:
    assert browser.get(query.format(value=raw_value, **ids)).status_code in (200, 302, 400, 404)


PAGE_ID_PATHS = [
    ("get", "/projects/{id}/edit"),
    ("post", "/projects/{id}/delete"),
    ("get", "/projects/{id}/repository"),
    ("post", "/projects/{id}/repository/link"),
    ("post", "/projects/{id}/repository/clone"),
    ("post", "/projects/{id}/repository/settings"),
    ("post", "/projects/{id}/repository/unlink"),
    ("get", "/tasks/{id}"),
    ("post", "/tasks/{id}/move"),
    ("post", "/tasks/{id}/delete"),
    ("get", "/tasks/{id}/pipeline"),
    ("post", "/tasks/{id}/pipeline/start"),
    ("post", "/runs/{id}/cancel"),
    ("post", "/runs/{id}/retry"),
    ("post", "/runs/{id}/request-changes"),
    ("post", "/runs/{id}/approve"),
    ("get", "/runs/{id}/patch"),
    ("post", "/runs/{id}/discard-branch"),
    ("get", "/memory/facts/{id}/edit"),
    ("post", "/memory/facts/{id}/delete"),
    ("get", "/memory/goals/{id}/edit"),
    ("post", "/memory/goals/{id}/complete"),
    ("post", "/memory/goals/{id}/delete"),
    ("post", "/memory/recall/{id}/reinforce"),
    ("post", "/memory/recall/{id}/delete"),
    ("post", "/memory/agents/coder/promote/{id}"),
    ("get", "/memory/runs/{id}/lineage"),
]


@pytest.mark.parametrize(("method", "path"), PAGE_ID_PATHS)
def test_ids_past_the_64_bit_range_in_a_page_path_are_a_404(
    browser: Client, ids: dict[str, int], method: str, path: str
) -> None:
    before = db_snapshot()
    for bad_id in BAD_IDS:
        assert getattr(browser, method)(path.format(id=bad_id)).status_code == 404
    assert db_snapshot() == before


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("get", "/memory/agents/{key}/"),
        ("post", "/memory/agents/{key}/append"),
        ("post", "/memory/agents/{key}/promote/1"),
        ("get", "/admin/memory/contextitem/{key}/change/"),
        ("get", "/projects/{key}/repository"),
    ],
)
@pytest.mark.parametrize("key", ["%00", "coder%00", "a%00%01b"])
def test_a_nul_in_a_page_path_is_a_404(browser: Client, ids: dict[str, int], method: str, path: str, key: str) -> None:
    before = db_snapshot()
    assert getattr(browser, method)(path.format(key=key), {"text": "x"}).status_code == 404
    assert db_snapshot() == before


@pytest.mark.parametrize("cookie", ['sessionid="\\000abcdefghij"', 'csrftoken="\\000abc"; sessionid=abcdefgh\\000'])
def test_a_nul_in_a_cookie_is_no_session(ids: dict[str, int], cookie: str) -> None:
    client = Client(HTTP_COOKIE=cookie)
    assert client.get("/").status_code == 302  # to the login page
    assert client.get("/api/auth/me").status_code in (401, 403)
    assert client.post("/tasks/new", {"title": "T"}).status_code in (302, 403)
