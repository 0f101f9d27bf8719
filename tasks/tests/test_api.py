"""REST API: /api/tasks, /api/tasks/{id} and /api/tasks/{id}/status."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal

import pytest
from rest_framework.test import APIClient

from accounts.models import User
from projects.models import Project
from projects.selectors import PROJECT_NOT_FOUND
from tasks.api.serializers import POSITION_NOT_EDITABLE, PROJECT_NOT_EDITABLE, STATUS_NOT_EDITABLE
from tasks.api.views import NO_PROJECT
from tasks.models import Task, TaskStatus, TaskStatusChange, allowed_moves
from tasks.selectors import TASK_NOT_FOUND
from tasks.services import invalid_move_message
from tests.api_helpers import assert_error, csrf_headers, field_errors
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

LIST = "/api/tasks"
FIELDS = {
    "id",
    "project",
    "title",
    "description",
    "category",
    "priority",
    "status",
    "position",
    "subtasks",
    "pipeline_state",
    "latest_run",
    "forge_issue",
    "total_cost",
    "spend_ceiling_usd",
    "coder_agent",
    "created_at",
    "updated_at",
}


def detail(task_id: object) -> str:
    return f"/api/tasks/{task_id}"


def move(task_id: object) -> str:
    return f"/api/tasks/{task_id}/status"


def titles(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [task["title"] for task in response.json()["results"]]


@pytest.fixture
def task(project: Project) -> Task:
    return TaskFactory(project=project, title="Write docs", category="docs", priority="high")


# --- list --------------------------------------------------------------------------------


def test_list_shows_own_tasks_in_board_order(owner_client: APIClient, project: Project, other_project: Project) -> None:
    TaskFactory(project=project, title="done-0", status=TaskStatus.DONE, position=0)
    TaskFactory(project=project, title="backlog-1", status=TaskStatus.BACKLOG, position=1)
    TaskFactory(project=project, title="backlog-0", status=TaskStatus.BACKLOG, position=0)
    TaskFactory(project=project, title="spec-0", status=TaskStatus.SPEC, position=0)
    TaskFactory(project=other_project, title="not mine")
    response = owner_client.get(LIST)
    assert titles(response) == ["backlog-0", "backlog-1", "spec-0", "done-0"]
    assert response.json()["count"] == 4
    assert set(response.json()["results"][0]) == FIELDS


def test_list_item_fields(owner_client: APIClient, task: Task) -> None:
    Task.objects.filter(pk=task.pk).update(subtasks=[{"id": 1, "title": "a"}], pipeline_state={"phase": "coding"})
    item = owner_client.get(LIST).json()["results"][0]
    assert item["id"] == task.pk
    assert item["project"] == task.project_id
    assert (item["title"], item["category"], item["priority"]) == ("Write docs", "docs", "high")
    assert (item["status"], item["position"]) == ("backlog", task.position)
    assert item["subtasks"] == [{"id": 1, "title": "a"}]
    assert item["pipeline_state"] == {"phase": "coding"}


def test_list_filters(owner_client: APIClient, project: Project) -> None:
    second = ProjectFactory(owner=project.owner)
    TaskFactory(project=project, title="Fix login bug", category="bugfix", status=TaskStatus.SPEC)
    TaskFactory(project=project, title="Add export", category="feature", description="CSV and LOGIN audit")
    TaskFactory(project=second, title="Second project bug", category="bugfix")
    assert titles(owner_client.get(LIST, {"project": second.pk})) == ["Second project bug"]
    assert sorted(titles(owner_client.get(LIST, {"category": "bugfix"}))) == ["Fix login bug", "Second project bug"]
    assert titles(owner_client.get(LIST, {"status": "spec"})) == ["Fix login bug"]
    assert sorted(titles(owner_client.get(LIST, {"q": " login "}))) == ["Add export", "Fix login bug"]
    assert titles(owner_client.get(LIST, {"project": project.pk, "category": "bugfix", "q": "LOGIN"})) == [
        "Fix login bug"
    ]
    assert len(titles(owner_client.get(LIST, {"status": "", "category": "", "q": ""}))) == 3
    assert titles(owner_client.get(LIST, {"status": "done"})) == []


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"status": "doing"}, "status"),
        ({"status": "BACKLOG"}, "status"),
        ({"category": "epic"}, "category"),
        ({"project": "abc"}, "project"),
        ({"q": "x" * 201}, "q"),
        ({"q": "nul\x00"}, "q"),
    ],
)
def test_list_rejects_invalid_filters(owner_client: APIClient, task: Task, params: dict, field: str) -> None:
    assert list(field_errors(owner_client.get(LIST, params))) == [field]


def test_list_filtered_by_someone_elses_project_is_404(
    owner_client: APIClient, task: Task, other_project: Project
) -> None:
    foreign = owner_client.get(LIST, {"project": other_project.pk})
    missing = owner_client.get(LIST, {"project": other_project.pk + 1000})
    assert_error(foreign, 404, "not_found", PROJECT_NOT_FOUND)
    assert missing.json() == foreign.json()


@pytest.mark.parametrize("filtered", [False, True])
def test_list_query_count_does_not_grow(
    owner_client: APIClient, project: Project, django_assert_num_queries, filtered: bool
) -> None:
    params = {"project": project.pk, "status": "backlog", "q": "task"} if filtered else {}
    owner_client.get(LIST)  # the token's first use records it (one write, once a minute)
    # token lookup, [the filtered project], page count, page rows
    expected = 4 if filtered else 3
    for size in (3, 30):
        Task.objects.all().delete()
        TaskFactory.create_batch(size, project=project)
        with django_assert_num_queries(expected):
            response = owner_client.get(LIST, params)
        assert response.json()["count"] == size


# --- create ------------------------------------------------------------------------------


def test_create_in_the_default_project(owner_client: APIClient, owner: User, project: Project) -> None:
    ProjectFactory(owner=owner, name="Newer")
    TaskFactory(project=project, status=TaskStatus.BACKLOG, position=0)
    response = owner_client.post(LIST, {"title": "  New task  "}, format="json")
    assert response.status_code == 201, response.content
    created = Task.objects.get(pk=response.json()["id"])
    assert created.project == project  # the oldest one
    assert (created.title, created.status, created.position) == ("New task", "backlog", 1)
    assert (created.category, created.priority, created.description) == ("feature", "medium", "")
    body = response.json()
    assert set(body) == FIELDS
    assert (body["project"], body["status"], body["position"], body["subtasks"]) == (project.pk, "backlog", 1, [])
    audit = TaskStatusChange.objects.get(task=created)
    assert (audit.from_status, audit.to_status, audit.actor) == ("", "backlog", owner)


def test_create_with_every_field(owner_client: APIClient, project: Project) -> None:
    second = ProjectFactory(owner=project.owner)
    body = {
        "project": second.pk,
        "title": "Refactor",
        "description": "d" * 50_000,
        "category": "refactor",
        "priority": "urgent",
    }
    response = owner_client.post(LIST, body, format="json")
    assert response.status_code == 201, response.content
    created = Task.objects.get()
    assert (created.project, created.category, created.priority) == (second, "refactor", "urgent")
    assert len(created.description) == 50_000


def test_create_ignores_read_only_fields(owner_client: APIClient, project: Project) -> None:
    body = {"title": "T", "status": "done", "position": 7, "subtasks": [1], "pipeline_state": {"x": 1}, "id": 999}
    response = owner_client.post(LIST, body, format="json")
    assert response.status_code == 201
    created = Task.objects.get()
    assert (created.status, created.position, created.subtasks, created.pipeline_state) == ("backlog", 0, [], {})
    assert response.json()["id"] == created.pk


def test_create_in_someone_elses_project_reads_like_a_missing_one(
    owner_client: APIClient, project: Project, other_project: Project
) -> None:
    foreign = owner_client.post(LIST, {"title": "T", "project": other_project.pk}, format="json")
    missing = owner_client.post(LIST, {"title": "T", "project": other_project.pk + 1000}, format="json")
    assert field_errors(foreign) == {"project": [PROJECT_NOT_FOUND]}
    assert missing.json() == foreign.json()
    assert not Task.objects.exists()


def test_create_without_any_project(owner_client: APIClient, owner: User) -> None:
    response = owner_client.post(LIST, {"title": "T"}, format="json")
    assert field_errors(response) == {"project": [NO_PROJECT]}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "title"),
        ({"title": ""}, "title"),
        ({"title": "   "}, "title"),
        ({"title": None}, "title"),
        ({"title": 123}, "title"),
        ({"title": ["a", "b"]}, "title"),
        ({"title": "t" * 201}, "title"),
        ({"title": "t" * 10_000}, "title"),
        ({"title": "nul\x00"}, "title"),
        ({"title": "T", "description": "d" * 50_001}, "description"),
        ({"title": "T", "description": 1.5}, "description"),
        ({"title": "T", "category": "epic"}, "category"),
        ({"title": "T", "category": ["feature"]}, "category"),
        ({"title": "T", "priority": "critical"}, "priority"),
        ({"title": "T", "priority": None}, "priority"),
        ({"title": "T", "project": "first"}, "project"),
        ({"title": "T", "project": [1]}, "project"),
        ({"title": "T", "project": None}, "project"),
        ({"title": "T", "project": 10**30}, "project"),
    ],
)
def test_create_rejects_invalid_input(owner_client: APIClient, project: Project, body: dict, field: str) -> None:
    assert list(field_errors(owner_client.post(LIST, body, format="json"))) == [field]
    assert not Task.objects.exists()


# --- retrieve, update, delete ------------------------------------------------------------


def test_retrieve(owner_client: APIClient, task: Task) -> None:
    response = owner_client.get(detail(task.pk))
    assert response.status_code == 200
    assert set(response.json()) == FIELDS
    assert (response.json()["id"], response.json()["title"]) == (task.pk, "Write docs")


def test_update(owner_client: APIClient, task: Task) -> None:
    body = {"title": " Better docs ", "description": "All of it", "category": "chore", "priority": "low"}
    response = owner_client.patch(detail(task.pk), body, format="json")
    assert response.status_code == 200, response.content
    task.refresh_from_db()
    assert (task.title, task.description, task.category, task.priority) == ("Better docs", "All of it", "chore", "low")
    assert response.json()["title"] == "Better docs"
    assert task.status == "backlog"


def test_update_one_field(owner_client: APIClient, task: Task) -> None:
    response = owner_client.patch(detail(task.pk), {"priority": "urgent"}, format="json")
    assert response.status_code == 200
    task.refresh_from_db()
    assert (task.title, task.priority, task.category) == ("Write docs", "urgent", "docs")


def test_update_with_an_empty_body_changes_nothing(owner_client: APIClient, task: Task) -> None:
    before = task.updated_at
    response = owner_client.patch(detail(task.pk), {}, format="json")
    assert response.status_code == 200
    task.refresh_from_db()
    assert task.updated_at == before


@pytest.mark.parametrize(
    ("body", "errors"),
    [
        ({"status": "done"}, {"status": [STATUS_NOT_EDITABLE]}),
        ({"status": "spec", "title": "x"}, {"status": [STATUS_NOT_EDITABLE]}),
        ({"position": 0}, {"position": [POSITION_NOT_EDITABLE]}),
        ({"project": 1}, {"project": [PROJECT_NOT_EDITABLE]}),
    ],
)
def test_update_refuses_moves(owner_client: APIClient, task: Task, body: dict, errors: dict) -> None:
    response = owner_client.patch(detail(task.pk), body, format="json")
    assert field_errors(response) == errors
    assert "/status" in STATUS_NOT_EDITABLE
    task.refresh_from_db()
    assert (task.status, task.title) == ("backlog", "Write docs")


@pytest.mark.parametrize(
    "body",
    [{"title": ""}, {"title": 5}, {"title": "t" * 201}, {"category": "epic"}, {"priority": 3}, {"description": None}],
)
def test_update_rejects_invalid_input(owner_client: APIClient, task: Task, body: dict) -> None:
    assert list(field_errors(owner_client.patch(detail(task.pk), body, format="json"))) == list(body)
    task.refresh_from_db()
    assert (task.title, task.category, task.priority) == ("Write docs", "docs", "high")


def test_delete(owner_client: APIClient, task: Task) -> None:
    response = owner_client.delete(detail(task.pk))
    assert response.status_code == 204
    assert not Task.objects.filter(pk=task.pk).exists()


@pytest.mark.parametrize("task_id", ["abc", "1.5", "-1", "0", "99999999999999999999999999"])
def test_ids_that_name_no_task_are_404(owner_client: APIClient, task: Task, task_id: str) -> None:
    for response in (
        owner_client.get(detail(task_id)),
        owner_client.patch(detail(task_id), {"title": "x"}, format="json"),
        owner_client.delete(detail(task_id)),
        owner_client.patch(move(task_id), {"status": "spec"}, format="json"),
    ):
        assert_error(response, 404, "not_found", TASK_NOT_FOUND)
    assert Task.objects.filter(pk=task.pk, title="Write docs").exists()


# --- move --------------------------------------------------------------------------------


def test_move_to_an_allowed_column(owner_client: APIClient, owner: User, task: Task) -> None:
    response = owner_client.patch(move(task.pk), {"status": "spec"}, format="json")
    assert response.status_code == 200, response.content
    assert (response.json()["status"], response.json()["position"]) == ("spec", 0)
    task.refresh_from_db()
    assert task.status == "spec"
    audit = TaskStatusChange.objects.get(task=task)
    assert (audit.from_status, audit.to_status, audit.actor) == ("backlog", "spec", owner)


def test_move_to_a_position(owner_client: APIClient, project: Project, task: Task) -> None:
    first = TaskFactory(project=project, status=TaskStatus.SPEC, position=0)
    second = TaskFactory(project=project, status=TaskStatus.SPEC, position=1)
    response = owner_client.patch(move(task.pk), {"status": "spec", "position": 1}, format="json")
    assert response.status_code == 200
    assert response.json()["position"] == 1
    order = list(Task.objects.filter(status="spec").order_by("position").values_list("pk", flat=True))
    assert order == [first.pk, task.pk, second.pk]


def test_reorder_within_a_column(owner_client: APIClient, project: Project) -> None:
    a, b, c = (TaskFactory(project=project, position=index) for index in range(3))
    response = owner_client.patch(move(c.pk), {"status": "backlog", "position": 0}, format="json")
    assert response.status_code == 200
    assert list(Task.objects.order_by("position").values_list("pk", flat=True)) == [c.pk, a.pk, b.pk]
    assert not TaskStatusChange.objects.exists()  # same column: no status change recorded


def test_a_position_past_the_end_goes_last(owner_client: APIClient, project: Project, task: Task) -> None:
    TaskFactory(project=project, status=TaskStatus.SPEC, position=0)
    response = owner_client.patch(move(task.pk), {"status": "spec", "position": 10**12}, format="json")
    assert (response.status_code, response.json()["position"]) == (200, 1)


def test_a_refused_move_lists_the_allowed_ones(owner_client: APIClient, task: Task) -> None:
    response = owner_client.patch(move(task.pk), {"status": "done"}, format="json")
    body = assert_error(response, 400, "invalid_transition", invalid_move_message("backlog", "done"))
    assert body["extra"] == {"allowed": allowed_moves("backlog")} == {"allowed": ["spec"]}
    task.refresh_from_db()
    assert task.status == "backlog"
    assert not TaskStatusChange.objects.exists()


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({}, "status"),
        ({"status": "doing"}, "status"),
        ({"status": None}, "status"),
        ({"status": ["spec"]}, "status"),
        ({"status": "spec", "position": "x"}, "position"),
        ({"status": "spec", "position": -1}, "position"),
        ({"status": "spec", "position": 1.5}, "position"),
        ({"status": "spec", "position": True}, "position"),
        ({"status": "spec", "position": [0]}, "position"),
    ],
)
def test_move_rejects_invalid_input(owner_client: APIClient, task: Task, body: dict, field: str) -> None:
    assert list(field_errors(owner_client.patch(move(task.pk), body, format="json"))) == [field]
    task.refresh_from_db()
    assert task.status == "backlog"


def test_trailing_slashes_work(owner_client: APIClient, project: Project, task: Task) -> None:
    assert owner_client.get(LIST + "/").json()["count"] == 1
    assert owner_client.post(LIST + "/", {"title": "Slashed"}, format="json").status_code == 201
    assert owner_client.get(detail(task.pk) + "/").json()["id"] == task.pk
    assert owner_client.patch(detail(task.pk) + "/", {"title": "Re"}, format="json").json()["title"] == "Re"
    assert owner_client.patch(move(task.pk) + "/", {"status": "spec"}, format="json").json()["status"] == "spec"
    assert owner_client.delete(detail(task.pk) + "/").status_code == 204


# --- personas ----------------------------------------------------------------------------

Call = Callable[[APIClient, Task], object]

OBJECT_CALLS: dict[str, Call] = {
    "get": lambda client, task: client.get(detail(task.pk)),
    "patch": lambda client, task: client.patch(detail(task.pk), {"title": "Taken over"}, format="json"),
    "delete": lambda client, task: client.delete(detail(task.pk)),
    "move": lambda client, task: client.patch(move(task.pk), {"status": "spec"}, format="json"),
}
ALL_CALLS: dict[str, Call] = {
    "list": lambda client, task: client.get(LIST),
    "create": lambda client, task: client.post(LIST, {"title": "New", "project": task.project_id}, format="json"),
    **OBJECT_CALLS,
}


def assert_untouched(task: Task) -> None:
    task.refresh_from_db()
    assert (task.title, task.status) == ("Write docs", "backlog")
    assert Task.objects.count() == 1


@pytest.mark.parametrize("call", ALL_CALLS.values(), ids=ALL_CALLS.keys())
def test_anonymous_is_401_everywhere(anon_client: APIClient, task: Task, call: Call) -> None:
    assert_error(call(anon_client, task), 401, "not_authenticated")
    assert_untouched(task)


@pytest.mark.parametrize("call", OBJECT_CALLS.values(), ids=OBJECT_CALLS.keys())
def test_another_users_task_is_404(other_client: APIClient, task: Task, call: Call) -> None:
    assert_error(call(other_client, task), 404, "not_found", TASK_NOT_FOUND)
    assert_untouched(task)


def test_another_user_cannot_add_to_the_project(other_client: APIClient, other_project: Project, task: Task) -> None:
    response = ALL_CALLS["create"](other_client, task)
    assert field_errors(response) == {"project": [PROJECT_NOT_FOUND]}
    assert_untouched(task)


def test_another_user_does_not_see_the_task(other_client: APIClient, task: Task) -> None:
    assert other_client.get(LIST).json()["count"] == 0
    assert_error(other_client.get(LIST, {"project": task.project_id}), 404, "not_found")


@pytest.mark.parametrize("call", ALL_CALLS.values(), ids=ALL_CALLS.keys())
def test_owner_works_with_a_token(owner_client: APIClient, task: Task, call: Call) -> None:
    response = call(owner_client, task)
    assert response.status_code in (200, 201, 204), response.content


@pytest.mark.parametrize("call", ALL_CALLS.values(), ids=ALL_CALLS.keys())
def test_owner_works_with_the_session_and_csrf(owner_session_client: APIClient, task: Task, call: Call) -> None:
    owner_session_client.credentials(**csrf_headers(owner_session_client))
    response = call(owner_session_client, task)
    assert response.status_code in (200, 201, 204), response.content


UNSAFE_CALLS = {name: ALL_CALLS[name] for name in ("create", "patch", "delete", "move")}


@pytest.mark.parametrize("call", UNSAFE_CALLS.values(), ids=UNSAFE_CALLS.keys())
def test_session_writes_without_csrf_are_refused(owner_session_client: APIClient, task: Task, call: Call) -> None:
    body = assert_error(call(owner_session_client, task), 403, "permission_denied")
    assert "CSRF" in body["message"]
    assert_untouched(task)


def test_a_task_shows_its_spending_ceiling(owner_client, project, settings) -> None:
    task = TaskFactory(project=project)
    assert owner_client.get(detail(task.pk)).json()["spend_ceiling_usd"] is None
    settings.TASK_SPEND_CEILING_USD = 4.0
    assert owner_client.get(detail(task.pk)).json()["spend_ceiling_usd"] == "4.00"
    project.task_spend_ceiling_usd = Decimal("12.5")
    project.save()
    assert owner_client.get(detail(task.pk)).json()["spend_ceiling_usd"] == "12.50"
    listed = owner_client.get("/api/tasks", {"project": project.pk}).json()["results"]
    assert [item["spend_ceiling_usd"] for item in listed] == ["12.50"]
    project.task_spend_ceiling_usd = Decimal("0")
    project.save()
    assert owner_client.get(detail(task.pk)).json()["spend_ceiling_usd"] is None
