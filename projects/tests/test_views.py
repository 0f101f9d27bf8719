from __future__ import annotations

import re
from decimal import Decimal

import pytest
from django.urls import reverse

from accounts.models import User
from projects.context_processors import SESSION_KEY
from projects.models import Project
from projects.services import LAST_PROJECT, NAME_TAKEN
from tasks.models import Task
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db

BOARD = reverse("tasks:board")
LIST = reverse("projects:list")
CREATE = reverse("projects:create")


def edit_url(project: Project) -> str:
    return reverse("projects:edit", args=[project.pk])


def delete_url(project: Project) -> str:
    return reverse("projects:delete", args=[project.pk])


# --- personas ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "name"),
    [
        ("get", "list"),
        ("get", "create"),
        ("post", "create"),
        ("get", "edit"),
        ("post", "edit"),
        ("get", "delete"),
        ("post", "delete"),
    ],
)
def test_anonymous_is_sent_to_login(client, project: Project, method: str, name: str) -> None:
    url = reverse(f"projects:{name}", args=[project.pk] if name in ("edit", "delete") else [])
    response = getattr(client, method)(url, {"name": "Hijack"})
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("accounts:login") + "?next=")
    project.refresh_from_db()
    assert project.name == "Alice's project"


@pytest.mark.parametrize(("method", "name"), [("get", "edit"), ("post", "edit"), ("get", "delete"), ("post", "delete")])
def test_other_users_project_is_not_found(
    client, owner: User, project: Project, other_project: Project, method: str, name: str
) -> None:
    client.force_login(owner)
    response = getattr(client, method)(reverse(f"projects:{name}", args=[other_project.pk]), {"name": "Mine now"})
    assert response.status_code == 404
    other_project.refresh_from_db()
    assert other_project.name == "Bob's project"


def test_other_users_project_cannot_be_switched_to(
    client, owner: User, project: Project, other_project: Project
) -> None:
    TaskFactory(project=other_project, title="Bob's secret task")
    client.force_login(owner)
    response = client.get(f"{BOARD}?project={other_project.pk}")
    assert response.status_code == 404
    assert b"Bob's secret task" not in response.content
    assert client.session.get(SESSION_KEY) != other_project.pk


@pytest.mark.parametrize("value", ["abc", "0", "-1", "99999"])
def test_switching_to_a_bad_project_id_is_not_found(client, owner: User, project: Project, value: str) -> None:
    client.force_login(owner)
    assert client.get(f"{BOARD}?project={value}").status_code == 404


# --- switcher and current project ----------------------------------------------------


def test_switcher_lists_only_my_projects_with_task_counts(
    client, owner: User, project: Project, other_project: Project
) -> None:
    second = ProjectFactory(owner=owner, name="Second")
    TaskFactory(project=second)
    TaskFactory(project=second)
    client.force_login(owner)
    response = client.get(BOARD)
    assert response.status_code == 200
    assert [p.name for p in response.context["projects"]] == ["Alice's project", "Second"]
    assert response.context["current_project"] == project
    content = response.content.decode()
    assert f'href="/?project={second.pk}"' in content
    assert "2 tasks" in content
    assert "Bob&#x27;s project" not in content


def test_switching_project_is_remembered_in_the_session(client, owner: User, project: Project) -> None:
    second = ProjectFactory(owner=owner, name="Second")
    TaskFactory(project=second, title="Only in second")
    TaskFactory(project=project, title="Only in first")
    client.force_login(owner)
    response = client.get(f"{BOARD}?project={second.pk}")
    assert response.status_code == 200
    assert client.session[SESSION_KEY] == second.pk
    response = client.get(BOARD)
    assert response.context["current_project"] == second
    assert b"Only in second" in response.content
    assert b"Only in first" not in response.content
    # Other pages show the same current project in the switcher.
    assert client.get(LIST).context["current_project"] == second


def test_a_stale_current_project_falls_back_to_the_default(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    session = client.session
    session[SESSION_KEY] = 987654
    session.save()
    response = client.get(BOARD)
    assert response.status_code == 200
    assert response.context["current_project"] == project


def test_pages_share_one_projects_query(client, owner: User, project: Project, django_assert_max_num_queries) -> None:
    for n in range(5):
        ProjectFactory(owner=owner, name=f"P{n}")
    client.force_login(owner)
    # session + user + projects (switcher, shared with the view) + tasks
    with django_assert_max_num_queries(4):
        response = client.get(BOARD)
    assert response.status_code == 200
    assert len(response.context["projects"]) == 6


# --- create --------------------------------------------------------------------------


def test_create_project_makes_it_current(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    assert client.get(CREATE).status_code == 200
    response = client.post(CREATE, {"name": "  Billing   service ", "description": " Invoices "})
    assert response.status_code == 302
    assert response["Location"] == BOARD
    created = Project.objects.get(owner=owner, name="Billing service")
    assert created.description == "Invoices"
    assert client.session[SESSION_KEY] == created.pk
    board = client.get(BOARD)
    assert board.context["current_project"] == created
    assert "Project “Billing service” created." in board.content.decode()


@pytest.mark.parametrize(
    ("name", "error"),
    [
        ("", "This field is required."),
        ("   ", "This field is required."),
        ("x" * 101, "Ensure this value has at most 100 characters"),
    ],
)
def test_create_project_with_bad_name_is_refused(client, owner: User, project: Project, name: str, error: str) -> None:
    client.force_login(owner)
    response = client.post(CREATE, {"name": name})
    assert response.status_code == 400
    assert error in response.content.decode()
    assert Project.objects.filter(owner=owner).count() == 1


def test_create_project_with_a_taken_name_is_refused(
    client, owner: User, project: Project, other_project: Project
) -> None:
    client.force_login(owner)
    response = client.post(CREATE, {"name": "ALICE'S PROJECT"})
    assert response.status_code == 400
    assert NAME_TAKEN in response.content.decode()
    assert Project.objects.filter(owner=owner).count() == 1
    # Another user's name is free to use.
    assert client.post(CREATE, {"name": "Bob's project"}).status_code == 302


# --- rename --------------------------------------------------------------------------


def test_rename_project(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    page = client.get(edit_url(project))
    assert page.status_code == 200
    assert 'value="Alice&#x27;s project"' in page.content.decode()
    response = client.post(edit_url(project), {"name": "Renamed", "description": "New words"})
    assert response.status_code == 302
    assert response["Location"] == LIST
    project.refresh_from_db()
    assert (project.name, project.description) == ("Renamed", "New words")


def test_rename_to_a_taken_name_keeps_the_old_one(client, owner: User, project: Project) -> None:
    ProjectFactory(owner=owner, name="Taken")
    client.force_login(owner)
    response = client.post(edit_url(project), {"name": "taken"})
    assert response.status_code == 400
    assert NAME_TAKEN in response.content.decode()
    project.refresh_from_db()
    assert project.name == "Alice's project"


def test_rename_to_blank_is_refused(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    response = client.post(edit_url(project), {"name": " "})
    assert response.status_code == 400
    assert response.context["form"].errors["name"] == ["This field is required."]
    project.refresh_from_db()
    assert project.name == "Alice's project"


def test_instructions_are_edited_on_the_settings_page(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    response = client.post(edit_url(project), {"name": project.name, "instructions": "Use tabs & spaces"})
    assert response.status_code == 302
    project.refresh_from_db()
    assert project.instructions == "Use tabs & spaces"
    page = client.get(edit_url(project)).content.decode()
    assert 'name="instructions"' in page and "Use tabs &amp; spaces" in page


def test_too_long_instructions_are_refused(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    response = client.post(edit_url(project), {"name": project.name, "instructions": "x" * 20_001})
    assert response.status_code == 400
    assert response.context["form"].errors["instructions"]
    project.refresh_from_db()
    assert project.instructions == ""


def test_learning_settings_on_the_settings_page(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    page = client.get(edit_url(project)).content.decode()
    assert re.search(r'<input type="checkbox" name="learn_distil"[^>]*checked', page)  # on by default
    response = client.post(edit_url(project), {"name": project.name, "lesson_half_life_hours": "72"})
    assert response.status_code == 302
    project.refresh_from_db()
    # An unticked box is not sent: distillation is off now.
    assert (project.learn_distil, project.lesson_half_life_hours) == (False, 72.0)
    page = client.get(edit_url(project)).content.decode()
    assert not re.search(r'<input type="checkbox" name="learn_distil"[^>]*checked', page)


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf", "1000000"])
def test_a_bad_lesson_half_life_is_refused(client, owner: User, project: Project, value: str) -> None:
    client.force_login(owner)
    response = client.post(
        edit_url(project), {"name": project.name, "learn_distil": "on", "lesson_half_life_hours": value}
    )
    assert response.status_code == 400
    assert response.context["form"].errors["lesson_half_life_hours"]
    project.refresh_from_db()
    assert project.lesson_half_life_hours is None


def test_runs_at_once_on_the_settings_page(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    assert 'name="runs_at_once"' in client.get(edit_url(project)).content.decode()
    response = client.post(edit_url(project), {"name": project.name, "runs_at_once": "3"})
    assert response.status_code == 302
    project.refresh_from_db()
    assert project.runs_at_once == 3
    refused = client.post(edit_url(project), {"name": project.name, "runs_at_once": "51"})
    assert refused.status_code == 400
    assert refused.context["form"].errors["runs_at_once"]
    project.refresh_from_db()
    assert project.runs_at_once == 3


# --- delete --------------------------------------------------------------------------


def test_delete_asks_to_confirm_then_deletes_with_tasks(client, owner: User, project: Project) -> None:
    doomed = ProjectFactory(owner=owner, name="Doomed")
    TaskFactory(project=doomed)
    TaskFactory(project=doomed)
    client.force_login(owner)
    confirm = client.get(delete_url(doomed))
    assert confirm.status_code == 200
    content = confirm.content.decode()
    assert "Delete “Doomed”?" in content
    assert "2 tasks" in content
    assert Project.objects.filter(pk=doomed.pk).exists()  # GET changes nothing

    response = client.post(delete_url(doomed))
    assert response.status_code == 302
    assert response["Location"] == LIST
    assert not Project.objects.filter(pk=doomed.pk).exists()
    assert not Task.objects.filter(project_id=doomed.pk).exists()
    assert "Project “Doomed” and its tasks were deleted." in client.get(LIST).content.decode()


def test_deleting_the_current_project_switches_to_the_default(client, owner: User, project: Project) -> None:
    second = ProjectFactory(owner=owner, name="Second")
    client.force_login(owner)
    client.get(f"{BOARD}?project={second.pk}")
    client.post(delete_url(second))
    response = client.get(BOARD)
    assert response.status_code == 200
    assert response.context["current_project"] == project


def test_deleting_the_last_project_is_refused(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    confirm = client.get(delete_url(project))
    assert confirm.status_code == 200
    assert LAST_PROJECT in confirm.content.decode()
    assert b"Delete project</button>" not in confirm.content

    response = client.post(delete_url(project), follow=True)
    assert response.redirect_chain == [(LIST, 302)]
    assert LAST_PROJECT in response.content.decode()
    assert Project.objects.filter(pk=project.pk).exists()


# --- list ----------------------------------------------------------------------------


def test_project_list_shows_my_projects_only(client, owner: User, project: Project, other_project: Project) -> None:
    TaskFactory(project=project)
    client.force_login(owner)
    response = client.get(LIST)
    assert response.status_code == 200
    content = response.content.decode()
    assert "Alice&#x27;s project" in content
    assert "1 task ·" in content
    assert "Bob&#x27;s project" not in content
    assert edit_url(project) in content
    assert edit_url(other_project) not in content


def test_board_for_a_user_without_projects_offers_to_create_one(client, owner: User) -> None:
    client.force_login(owner)
    response = client.get(BOARD)
    assert response.status_code == 200
    assert "You have no projects yet" in response.content.decode()
    assert reverse("projects:create") in response.content.decode()
    assert client.get(reverse("tasks:create")).status_code == 302


def test_the_settings_page_names_each_default_it_falls_back_to(client, owner: User, project: Project, settings) -> None:
    settings.LLM_MAX_TOKENS, settings.RUN_TOKEN_BUDGET, settings.RUNS_AT_ONCE_PER_PROJECT = 4096, 250_000, 3
    client.force_login(owner)
    html = client.get(edit_url(project)).content.decode()
    assert "Empty = the server&#x27;s default, 4,096." in html or "Empty = the server's default, 4,096." in html
    assert "default, 250,000 tokens." in html
    assert "default, 3." in html
    assert f"({settings.LLM_MODEL})" in html


def test_task_spend_ceiling_on_the_settings_page(client, owner: User, project: Project) -> None:
    client.force_login(owner)
    assert 'name="task_spend_ceiling_usd"' in client.get(edit_url(project)).content.decode()
    response = client.post(edit_url(project), {"name": project.name, "task_spend_ceiling_usd": "7.50"})
    assert response.status_code == 302
    project.refresh_from_db()
    assert project.task_spend_ceiling_usd == Decimal("7.50")
    refused = client.post(edit_url(project), {"name": project.name, "task_spend_ceiling_usd": "-1"})
    assert refused.status_code == 400
    assert refused.context["form"].errors["task_spend_ceiling_usd"]
    project.refresh_from_db()
    assert project.task_spend_ceiling_usd == Decimal("7.50")
