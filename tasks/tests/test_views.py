from __future__ import annotations

import re

import pytest
from django.urls import reverse

from accounts.models import User
from projects.models import Project
from tasks.models import Task, TaskCategory, TaskPriority, TaskStatus, TaskStatusChange
from tasks.selectors import BOARD_COLUMN_CAP
from tasks.services import invalid_move_message
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

BOARD = reverse("tasks:board")
CREATE = reverse("tasks:create")


def detail_url(task: Task) -> str:
    return reverse("tasks:detail", args=[task.pk])


def move_url(task: Task) -> str:
    return reverse("tasks:move", args=[task.pk])


def delete_url(task: Task) -> str:
    return reverse("tasks:delete", args=[task.pk])


def column_titles(response, status: str) -> list[str]:
    """Card titles in one column of a rendered board, in order."""
    html = response.content.decode()
    section = re.search(rf'<section class="column column-{status}".*?</section>', html, re.S)
    assert section, f"no {status} column"
    return re.findall(r'class="card-title"[^>]*>([^<]+)</a>', section.group(0))


@pytest.fixture
def task(project: Project) -> Task:
    return TaskFactory(project=project, title="Fix the login page", status=TaskStatus.BACKLOG)


@pytest.fixture
def other_task(other_project: Project) -> Task:
    return TaskFactory(project=other_project, title="Bob's private task")


@pytest.fixture
def owner_client(client, owner: User):
    """Django's test client, logged in through the session as the owner."""
    client.force_login(owner)
    return client


# --- personas ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "name"),
    [("get", "detail"), ("post", "detail"), ("post", "move"), ("get", "delete"), ("post", "delete")],
)
def test_anonymous_is_sent_to_login_from_task_pages(client, task: Task, method: str, name: str) -> None:
    url = reverse(f"tasks:{name}", args=[task.pk])
    response = getattr(client, method)(url, {"title": "Hijacked", "status": "spec"})
    assert response.status_code == 302
    assert response["Location"].startswith(f"{reverse('accounts:login')}?next={url}")
    task.refresh_from_db()
    assert (task.title, task.status) == ("Fix the login page", TaskStatus.BACKLOG)


@pytest.mark.parametrize("method", ["get", "post"])
def test_anonymous_cannot_create_tasks(client, project: Project, method: str) -> None:
    response = getattr(client, method)(CREATE, {"title": "Sneaky", "project": project.pk})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("accounts:login"))
    assert not Task.objects.exists()


@pytest.mark.parametrize(
    ("method", "name"),
    [("get", "detail"), ("post", "detail"), ("post", "move"), ("get", "delete"), ("post", "delete")],
)
def test_other_users_task_is_not_found(
    owner_client, project: Project, other_task: Task, method: str, name: str
) -> None:
    response = getattr(owner_client, method)(
        reverse(f"tasks:{name}", args=[other_task.pk]), {"title": "Mine now", "status": "spec"}
    )
    assert response.status_code == 404
    assert b"Bob&#x27;s private task" not in response.content
    assert "We couldn’t find that page" in response.content.decode()  # the app's 404 page, same as a missing task
    other_task.refresh_from_db()
    assert (other_task.title, other_task.status) == ("Bob's private task", TaskStatus.BACKLOG)


def test_missing_task_is_not_found(owner_client, project: Project) -> None:
    assert owner_client.get(reverse("tasks:detail", args=[123456])).status_code == 404
    assert owner_client.get("/tasks/not-a-number").status_code == 404


def test_cannot_create_a_task_in_another_users_project(owner_client, project: Project, other_project: Project) -> None:
    response = owner_client.post(CREATE, {"title": "Planted", "project": other_project.pk})
    assert response.status_code == 404
    assert not Task.objects.filter(title="Planted").exists()


# --- the board -----------------------------------------------------------------------


def test_board_shows_five_columns_in_order_with_counts(owner_client, project: Project) -> None:
    TaskFactory(project=project, title="Idea", status=TaskStatus.BACKLOG)
    TaskFactory(project=project, title="Second idea", status=TaskStatus.BACKLOG)
    TaskFactory(project=project, title="Being planned", status=TaskStatus.SPEC)
    TaskFactory(project=project, title="Shipped", status=TaskStatus.DONE)
    response = owner_client.get(BOARD)
    assert response.status_code == 200
    html = response.content.decode()
    headings = re.findall(r'<h2 id="column-(\w+)-title">([^<]+)</h2>', html)
    assert headings == [
        ("backlog", "Backlog"),
        ("spec", "Spec"),
        ("building", "Building"),
        ("review", "Review"),
        ("done", "Done"),
    ]
    counts = re.findall(r'<span class="count" data-count[^>]*>(\d+)</span>', html)
    assert counts == ["2", "1", "0", "0", "1"]
    assert column_titles(response, "backlog") == ["Idea", "Second idea"]
    assert column_titles(response, "spec") == ["Being planned"]
    assert column_titles(response, "building") == []
    assert column_titles(response, "done") == ["Shipped"]
    assert "Tasks being coded show up here." in html  # empty-column hint


def test_board_cards_show_category_and_priority_badges(owner_client, project: Project) -> None:
    t = TaskFactory(project=project, title="Crash on save", category=TaskCategory.BUGFIX, priority=TaskPriority.URGENT)
    html = owner_client.get(BOARD).content.decode()
    assert f'data-task-id="{t.pk}"' in html
    assert '<span class="badge cat-bugfix">Bug fix</span>' in html
    assert 'class="badge prio prio-urgent"' in html
    assert f'href="{detail_url(t)}"' in html


def test_board_never_shows_other_users_tasks(owner_client, project: Project, other_task: Task) -> None:
    TaskFactory(project=project, title="Mine")
    response = owner_client.get(BOARD)
    assert response.status_code == 200
    assert column_titles(response, "backlog") == ["Mine"]
    assert b"Bob&#x27;s private task" not in response.content


def test_board_shows_only_the_current_project(owner_client, owner: User, project: Project) -> None:
    other = ProjectFactory(owner=owner, name="Elsewhere")
    TaskFactory(project=other, title="Elsewhere task")
    TaskFactory(project=project, title="Here task")
    response = owner_client.get(BOARD)
    assert column_titles(response, "backlog") == ["Here task"]


def test_board_loads_its_scripts_and_transition_table(owner_client, project: Project) -> None:
    html = owner_client.get(BOARD).content.decode()
    assert 'src="/static/js/board.js"' in html
    assert 'src="/static/django_htmx/htmx-2.min.js"' in html
    assert '<script id="transition-table" type="application/json">' in html
    assert '"backlog": ["spec"]' in html


def test_static_assets_are_served_by_the_app(client, settings) -> None:
    # As under DEBUG (make run): whitenoise serves from the finders, no collectstatic.
    settings.WHITENOISE_USE_FINDERS = True
    for path in (
        "/static/css/app.css",
        "/static/js/board.js",
        "/static/js/app.js",
        "/static/django_htmx/htmx-2.min.js",
    ):
        response = client.get(path)
        assert response.status_code == 200, path
        body = b"".join(response.streaming_content) if response.streaming else response.content
        assert len(body) > 500, path


def test_search_narrows_the_board_by_title_and_description(owner_client, project: Project) -> None:
    TaskFactory(project=project, title="Export CSV", description="reports page")
    TaskFactory(project=project, title="Dark mode", description="Theme switch; export setting too")
    TaskFactory(project=project, title="Unrelated", description="nothing")
    response = owner_client.get(BOARD, {"q": " EXPORT "})
    assert response.status_code == 200
    assert column_titles(response, "backlog") == ["Export CSV", "Dark mode"]
    html = response.content.decode()
    assert "Showing <strong>2</strong> of 3 tasks" in html
    assert 'value=" EXPORT "' in html  # the search box keeps what was typed


def test_category_filter_narrows_the_board(owner_client, project: Project) -> None:
    TaskFactory(project=project, title="A bug", category=TaskCategory.BUGFIX, status=TaskStatus.SPEC)
    TaskFactory(project=project, title="A feature", category=TaskCategory.FEATURE)
    response = owner_client.get(BOARD, {"category": "bugfix"})
    assert response.status_code == 200
    assert column_titles(response, "spec") == ["A bug"]
    assert column_titles(response, "backlog") == []
    assert "in Bug fix" in response.content.decode()


def test_filters_combine(owner_client, project: Project) -> None:
    TaskFactory(project=project, title="Login bug", category=TaskCategory.BUGFIX)
    TaskFactory(project=project, title="Login feature", category=TaskCategory.FEATURE)
    TaskFactory(project=project, title="Other bug", category=TaskCategory.BUGFIX)
    response = owner_client.get(BOARD, {"category": "bugfix", "q": "login"})
    assert column_titles(response, "backlog") == ["Login bug"]


def test_unknown_category_is_ignored_not_an_error(owner_client, project: Project) -> None:
    TaskFactory(project=project, title="Still here")
    response = owner_client.get(BOARD, {"category": "<script>", "q": "x" * 500})
    assert response.status_code == 200
    assert column_titles(response, "backlog") == ["Still here"]
    assert b"<script>" not in response.content.split(b"<body", 1)[1].replace(b"<script src=", b"").replace(
        b'<script id="transition-table"', b""
    )


def test_htmx_filter_request_gets_only_the_board(owner_client, project: Project) -> None:
    TaskFactory(project=project, title="Export CSV")
    TaskFactory(project=project, title="Other")
    response = owner_client.get(BOARD, {"q": "csv"}, headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="board"')
    assert "<html" not in html
    assert column_titles(response, "backlog") == ["Export CSV"]
    assert "HX-Request" in response["Vary"]
    # A history restore needs the whole page.
    full = owner_client.get(BOARD, headers={"HX-Request": "true", "HX-History-Restore-Request": "true"})
    assert "<html" in full.content.decode()


# --- create --------------------------------------------------------------------------


def test_create_task_page_and_form(owner_client, project: Project) -> None:
    page = owner_client.get(CREATE)
    assert page.status_code == 200
    assert 'name="title"' in page.content.decode()
    response = owner_client.post(
        CREATE,
        {
            "title": "  Add CSV export  ",
            "description": " Reports page ",
            "category": "docs",
            "priority": "high",
            "project": project.pk,
        },
    )
    assert response.status_code == 302
    assert response["Location"] == BOARD
    task = Task.objects.get(project=project)
    assert (task.title, task.description, task.category, task.priority, task.status) == (
        "Add CSV export",
        "Reports page",
        "docs",
        "high",
        "backlog",
    )
    assert TaskStatusChange.objects.filter(task=task, to_status="backlog", actor__email="alice@example.com").exists()
    board = owner_client.get(BOARD)
    assert column_titles(board, "backlog") == ["Add CSV export"]
    assert "Task “Add CSV export” added to the backlog." in board.content.decode()


def test_quick_add_with_only_a_title_uses_defaults(owner_client, project: Project) -> None:
    response = owner_client.post(CREATE, {"title": "Quick one", "project": project.pk})
    assert response.status_code == 302
    task = Task.objects.get(title="Quick one")
    assert (task.category, task.priority, task.project_id) == ("feature", "medium", project.pk)


def test_create_without_project_uses_the_current_project(owner_client, owner: User, project: Project) -> None:
    second = ProjectFactory(owner=owner, name="Second")
    owner_client.get(BOARD, {"project": second.pk})
    assert owner_client.post(CREATE, {"title": "Goes to second"}).status_code == 302
    assert Task.objects.get(title="Goes to second").project == second


@pytest.mark.parametrize(
    ("data", "field", "error"),
    [
        ({"title": ""}, "title", "This field is required."),
        ({"title": "   "}, "title", "This field is required."),
        ({"title": "x" * 201}, "title", "Ensure this value has at most 200 characters (it has 201)."),
        (
            {"title": "ok", "category": "poetry"},
            "category",
            "Select a valid choice. poetry is not one of the available choices.",
        ),
        (
            {"title": "ok", "priority": "whenever"},
            "priority",
            "Select a valid choice. whenever is not one of the available choices.",
        ),
        ({"title": "ok", "description": "d" * 50_001}, "description", "Ensure this value has at most 50000 characters"),
    ],
)
def test_create_with_bad_input_rerenders_with_errors(
    owner_client, project: Project, data: dict, field: str, error: str
) -> None:
    response = owner_client.post(CREATE, {**data, "project": project.pk})
    assert response.status_code == 400
    assert any(error in message for message in response.context["form"].errors[field])
    assert 'class="field-error"' in response.content.decode()
    assert not Task.objects.exists()


def test_title_of_exactly_200_characters_is_fine(owner_client, project: Project) -> None:
    assert owner_client.post(CREATE, {"title": "x" * 200, "project": project.pk}).status_code == 302
    assert Task.objects.get().title == "x" * 200


# --- detail and edit -----------------------------------------------------------------


def test_task_page_shows_the_task_and_the_pipeline_panel(owner_client, task: Task) -> None:
    response = owner_client.get(detail_url(task))
    assert response.status_code == 200
    html = response.content.decode()
    assert '<h1 class="task-title">Fix the login page</h1>' in html
    assert 'id="pipeline"' in html
    assert "Start pipeline" in html  # no run yet (the panel itself: pipelines/tests/test_views.py)
    assert 'value="Fix the login page"' in html  # the edit form is filled in
    assert "Updated just now" in html
    assert "Created in <strong>Backlog</strong>" not in html  # factory rows have no history


def test_edit_task(owner_client, task: Task) -> None:
    response = owner_client.post(
        detail_url(task), {"title": " New title ", "description": "More", "category": "test", "priority": "low"}
    )
    assert response.status_code == 302
    assert response["Location"] == detail_url(task)
    task.refresh_from_db()
    assert (task.title, task.description, task.category, task.priority) == ("New title", "More", "test", "low")
    assert task.status == TaskStatus.BACKLOG  # editing never moves a task
    assert "Task saved." in owner_client.get(detail_url(task)).content.decode()


def test_edit_with_bad_input_keeps_the_task(owner_client, task: Task) -> None:
    response = owner_client.post(detail_url(task), {"title": "", "category": "feature", "priority": "medium"})
    assert response.status_code == 400
    assert response.context["form"].errors["title"] == ["This field is required."]
    html = response.content.decode()
    assert '<h1 class="task-title">Fix the login page</h1>' in html
    task.refresh_from_db()
    assert task.title == "Fix the login page"


# --- move without drag and drop ------------------------------------------------------


def test_task_page_offers_only_allowed_moves(owner_client, project: Project) -> None:
    task = TaskFactory(project=project, status=TaskStatus.REVIEW)
    html = owner_client.get(detail_url(task)).content.decode()
    form = re.search(r'<form method="post" action="[^"]+/move".*?</form>', html, re.S).group(0)
    assert re.findall(r'<option value="(\w+)">', form) == ["backlog", "building", "done"]


def test_move_along_the_transition_table(owner_client, owner: User, task: Task) -> None:
    response = owner_client.post(move_url(task), {"status": "spec"})
    assert response.status_code == 302
    assert response["Location"] == detail_url(task)
    task.refresh_from_db()
    assert task.status == TaskStatus.SPEC
    change = TaskStatusChange.objects.get(task=task, from_status="backlog", to_status="spec")
    assert change.actor == owner
    page = owner_client.get(detail_url(task)).content.decode()
    assert "Moved to Spec." in page
    assert "Moved from <strong>Backlog</strong> to <strong>Spec</strong>" in page


def test_move_outside_the_transition_table_is_refused_with_the_reason(owner_client, task: Task) -> None:
    response = owner_client.post(move_url(task), {"status": "done"})
    assert response.status_code == 400
    message = invalid_move_message("backlog", "done")
    assert message == "A task in backlog cannot be moved to done by hand. Allowed: spec."
    assert message in response.content.decode()
    task.refresh_from_db()
    assert task.status == TaskStatus.BACKLOG
    assert not TaskStatusChange.objects.filter(task=task, to_status="done").exists()


@pytest.mark.parametrize("data", [{"status": "nowhere"}, {}, {"status": "spec", "position": "-3"}])
def test_move_with_bad_input_is_refused(owner_client, task: Task, data: dict) -> None:
    response = owner_client.post(move_url(task), data)
    assert response.status_code == 400
    assert 'class="alert alert-error"' in response.content.decode()
    task.refresh_from_db()
    assert task.status == TaskStatus.BACKLOG


def test_move_needs_a_post(owner_client, task: Task) -> None:
    assert owner_client.get(move_url(task)).status_code == 405


def test_move_returns_to_a_local_next_page(owner_client, task: Task) -> None:
    response = owner_client.post(move_url(task), {"status": "spec", "next": "/"})
    assert response.status_code == 302
    assert response["Location"] == "/"
    response = owner_client.post(move_url(task), {"status": "backlog", "next": "https://evil.example/"})
    assert response["Location"] == detail_url(task)


def test_move_to_a_position_reorders_the_column(owner_client, project: Project) -> None:
    first = TaskFactory(project=project, title="first", status=TaskStatus.SPEC, position=0)
    TaskFactory(project=project, title="second", status=TaskStatus.SPEC, position=1)
    moving = TaskFactory(project=project, title="moving", status=TaskStatus.BACKLOG)
    assert owner_client.post(move_url(moving), {"status": "spec", "position": "1"}).status_code == 302
    assert column_titles(owner_client.get(BOARD), "spec") == ["first", "moving", "second"]
    first.refresh_from_db()
    assert first.position == 0


# --- delete --------------------------------------------------------------------------


def test_delete_task_asks_then_deletes(owner_client, task: Task) -> None:
    confirm = owner_client.get(delete_url(task))
    assert confirm.status_code == 200
    assert "Delete “Fix the login page”?" in confirm.content.decode()
    assert Task.objects.filter(pk=task.pk).exists()
    response = owner_client.post(delete_url(task))
    assert response.status_code == 302
    assert response["Location"] == BOARD
    assert not Task.objects.filter(pk=task.pk).exists()
    board = owner_client.get(BOARD)
    assert column_titles(board, "backlog") == []
    assert "Task “Fix the login page” deleted." in board.content.decode()


def test_board_query_count_does_not_grow_with_tasks(
    owner_client, project: Project, django_assert_max_num_queries
) -> None:
    for n in range(30):
        TaskFactory(project=project, status=TaskStatus.values[n % 5])
    with django_assert_max_num_queries(4):
        response = owner_client.get(BOARD)
    assert sum(int(c) for c in re.findall(r"data-count[^>]*>(\d+)<", response.content.decode())) == 30


# --- capped columns ("Show more") ----------------------------------------------------


def _cards(html: str) -> list[int]:
    return [int(pk) for pk in re.findall(r'data-task-id="(\d+)"', html)]


def _more_url(html: str) -> str:
    match = re.search(r'hx-get="([^"]+)"[^>]*data-show-more', html)
    assert match, "no Show more link"
    return match.group(1).replace("&amp;", "&")


def _column_of(n: int, project: Project, status: str = TaskStatus.BACKLOG, **fields) -> list[Task]:
    return Task.objects.bulk_create(
        [Task(project=project, title=f"Task {i}", status=status, position=i, **fields) for i in range(n)]
    )


def test_a_long_column_renders_the_cap_and_a_show_more_link_with_the_exact_count(
    owner_client, project: Project, django_assert_max_num_queries
) -> None:
    tasks = _column_of(150, project)
    TaskFactory(project=project, title="Being planned", status=TaskStatus.SPEC)
    with django_assert_max_num_queries(4):  # the same as a board of a few tasks
        response = owner_client.get(BOARD)
    html = response.content.decode()
    assert _cards(html) == [t.pk for t in tasks[:BOARD_COLUMN_CAP]] + [Task.objects.get(title="Being planned").pk]
    counts = re.findall(r'<span class="count" data-count[^>]*>(\d+)</span>', html)
    assert counts == ["150", "1", "0", "0", "0"]
    assert 'data-more-count="50"' in html
    assert "Show 50 more" in html
    assert html.count("data-show-more") == 1  # only the long column has one


def test_show_more_returns_the_rest_of_the_column_in_order(
    owner_client, project: Project, django_assert_max_num_queries
) -> None:
    tasks = _column_of(150, project)
    url = _more_url(owner_client.get(BOARD).content.decode())
    with django_assert_max_num_queries(5):
        response = owner_client.get(url, headers={"HX-Request": "true"})
    assert response.status_code == 200
    html = response.content.decode()
    assert _cards(html) == [t.pk for t in tasks[BOARD_COLUMN_CAP:]]
    assert 'hx-swap-oob="beforeend:#column-backlog-cards"' in html
    assert "data-show-more" not in html  # the end of the column
    assert 'data-more-count="0"' in html


def test_show_more_pages_through_a_column_longer_than_two_slices(owner_client, project: Project) -> None:
    tasks = _column_of(2 * BOARD_COLUMN_CAP + 30, project, status=TaskStatus.DONE)
    seen = _cards(owner_client.get(BOARD).content.decode())
    url = _more_url(owner_client.get(BOARD).content.decode())
    second = owner_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert "Show 30 more" in second and 'data-more-count="30"' in second
    third = owner_client.get(_more_url(second), headers={"HX-Request": "true"}).content.decode()
    assert seen + _cards(second) + _cards(third) == [t.pk for t in tasks]


def test_show_more_keeps_the_filters(owner_client, project: Project) -> None:
    matching = _column_of(120, project, description="needle")
    Task.objects.bulk_create(
        [Task(project=project, title=f"Other {i}", status=TaskStatus.BACKLOG, position=i) for i in range(50)]
    )
    html = owner_client.get(BOARD, {"q": "needle"}).content.decode()
    assert _cards(html) == [t.pk for t in matching[:BOARD_COLUMN_CAP]]
    assert re.findall(r'<span class="count" data-count[^>]*>(\d+)</span>', html)[0] == "120"
    assert "Showing <strong>120</strong> of 170 tasks" in html
    url = _more_url(html)
    assert "q=needle" in url
    rest = owner_client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert _cards(rest) == [t.pk for t in matching[BOARD_COLUMN_CAP:]]


def test_show_more_never_shows_another_users_tasks(owner_client, project: Project, other_project: Project) -> None:
    _column_of(BOARD_COLUMN_CAP + 10, other_project)
    html = owner_client.get(BOARD, {"column": "backlog", "offset": "0"}, headers={"HX-Request": "true"}).content
    assert _cards(html.decode()) == []


@pytest.mark.parametrize("params", [{"column": "nope"}, {"column": "backlog", "offset": "x"}])
def test_show_more_with_a_bad_column_or_offset(owner_client, project: Project, params: dict) -> None:
    _column_of(3, project)
    response = owner_client.get(BOARD, params, headers={"HX-Request": "true"})
    if params["column"] == "nope":
        assert response.status_code == 404
    else:  # a bad offset starts at the top
        assert response.status_code == 200
        assert len(_cards(response.content.decode())) == 3


def test_the_header_names_the_open_tasks_project_not_the_last_boards(client, owner: User, project: Project) -> None:
    elsewhere = ProjectFactory(owner=owner, name="Elsewhere")
    task = TaskFactory(project=elsewhere, title="A task elsewhere")
    client.force_login(owner)
    client.get(f"{BOARD}?project={project.pk}")  # the board of the first project, last seen

    page = client.get(reverse("tasks:detail", args=[task.pk])).content.decode()

    switcher = re.search(r'class="switcher-name">([^<]*)<', page)
    assert switcher is not None and switcher.group(1) == "Elsewhere"
    # And Board now leads back to the task's project.
    assert column_titles(client.get(BOARD), "backlog") == ["A task elsewhere"]


def test_quick_add_with_only_spaces_stays_on_the_board_and_says_why(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    response = client.post(
        reverse("tasks:create"), {"title": "   ", "project": project.pk, "from": "board"}, follow=True
    )
    assert response.redirect_chain[-1][0] == BOARD
    html = response.content.decode()
    assert "The task was not added. Title: This field is required." in html
    assert not Task.objects.exists()


def test_the_activity_partial_is_the_owners_alone(client, owner: User, other_user: User, project: Project) -> None:
    task = TaskFactory(project=project, title="Watched")
    client.force_login(owner)
    html = client.get(reverse("tasks:activity", args=[task.pk])).content.decode()
    assert 'data-testid="task-activity"' in html and '<h2 id="history-title">Activity</h2>' in html
    client.force_login(other_user)
    assert client.get(reverse("tasks:activity", args=[task.pk])).status_code == 404


def test_the_spec_column_says_what_lands_there_not_that_a_drag_plans_it(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    html = client.get(f"{BOARD}?project={project.pk}").content.decode()
    assert "Drag a task here to have it planned." not in html  # nothing happened on a drag
    assert "Tasks being planned show up here" in html
