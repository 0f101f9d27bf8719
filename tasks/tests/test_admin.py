"""Django admin: tasks and their status history."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import User
from projects.models import Project
from tasks.models import Task, TaskStatus, TaskStatusChange
from tasks.services import task_create, task_move
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser() -> User:
    return User.objects.create_superuser(email="root@example.com", password="root password")


@pytest.fixture
def operator(client: Client, superuser: User) -> Client:
    client.force_login(superuser)
    return client


@pytest.fixture
def task(project: Project, owner: User) -> Task:
    created = task_create(project=project, title="Ship it", category="bugfix", priority="high", actor=owner)
    return task_move(task=created, status=TaskStatus.SPEC, actor=owner)


def test_changelist_links_projects_and_owners(operator: Client, task: Task) -> None:
    response = operator.get(reverse("admin:tasks_task_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'href="{reverse("admin:projects_project_change", args=[task.project_id])}">Alice&#x27;s project</a>' in html
    assert f'href="{reverse("admin:accounts_user_change", args=[task.project.owner_id])}">alice@example.com</a>' in html
    for column in ("Status", "Category", "Priority", "Position"):
        assert column in html


def test_changelist_query_count_does_not_grow(
    operator: Client, project: Project, django_assert_max_num_queries
) -> None:
    TaskFactory.create_batch(40, project=project)
    with django_assert_max_num_queries(12):
        assert operator.get(reverse("admin:tasks_task_changelist")).status_code == 200


def test_filters_and_search(operator: Client, task: Task, other_project: Project) -> None:
    TaskFactory(project=other_project, title="Bob's chore", category="chore")
    url = reverse("admin:tasks_task_changelist")

    def titles(params: dict) -> list[str]:
        response = operator.get(url, params)
        assert response.status_code == 200
        return [row.title for row in response.context["cl"].result_list]

    assert titles({"status__exact": "spec"}) == ["Ship it"]
    assert titles({"category__exact": "chore"}) == ["Bob's chore"]
    assert titles({"priority__exact": "high"}) == ["Ship it"]
    assert titles({"q": "bob@example.com"}) == ["Bob's chore"]
    assert titles({"q": "ship"}) == ["Ship it"]


def test_change_page_shows_the_history_read_only(operator: Client, task: Task) -> None:
    response = operator.get(reverse("admin:tasks_task_change", args=[task.pk]))
    assert response.status_code == 200
    form = response.context["adminform"].form
    assert set(form.fields) == {"title", "description", "category", "priority", "coder_agent"}
    inline = response.context["inline_admin_formsets"][0]
    assert inline.formset.model is TaskStatusChange
    assert len(inline.formset.forms) == 2  # created, then moved to spec
    assert not inline.has_add_permission and not inline.has_change_permission and not inline.has_delete_permission


def test_change_form_edits_text_but_not_the_column(operator: Client, task: Task) -> None:
    response = operator.post(
        reverse("admin:tasks_task_change", args=[task.pk]),
        {
            "title": "  Ship it today ",
            "description": "Now",
            "category": "feature",
            "priority": "urgent",
            "status": "done",
            "position": "9",
            "status_changes-TOTAL_FORMS": "0",
            "status_changes-INITIAL_FORMS": "0",
        },
    )
    assert response.status_code == 302
    task.refresh_from_db()
    assert (task.title, task.description, task.category, task.priority) == ("Ship it today", "Now", "feature", "urgent")
    assert (task.status, task.position) == ("spec", 0)
    assert TaskStatusChange.objects.filter(task=task).count() == 2


def test_change_form_validates(operator: Client, task: Task) -> None:
    response = operator.post(
        reverse("admin:tasks_task_change", args=[task.pk]),
        {"title": "", "category": "epic", "priority": "high"},
    )
    assert response.status_code == 200
    assert set(response.context["adminform"].form.errors) == {"title", "category"}
    task.refresh_from_db()
    assert task.title == "Ship it"


def test_tasks_are_not_added_in_the_admin(operator: Client) -> None:
    assert operator.get(reverse("admin:tasks_task_add")).status_code == 403


def test_a_task_can_be_deleted(operator: Client, task: Task) -> None:
    ProjectFactory(owner=task.project.owner)
    url = reverse("admin:tasks_task_delete", args=[task.pk])
    assert operator.get(url).status_code == 200
    assert operator.post(url, {"post": "yes"}).status_code == 302
    assert not Task.objects.exists()
    assert not TaskStatusChange.objects.exists()  # the history goes with the task


def test_status_changes_are_read_only(operator: Client, task: Task) -> None:
    listing = operator.get(reverse("admin:tasks_taskstatuschange_changelist"))
    assert listing.status_code == 200
    html = listing.content.decode()
    assert reverse("admin:tasks_task_change", args=[task.pk]) in html
    assert reverse("admin:accounts_user_change", args=[task.project.owner_id]) in html
    change = TaskStatusChange.objects.filter(task=task).first()
    assert change is not None
    page = operator.get(reverse("admin:tasks_taskstatuschange_change", args=[change.pk]))
    assert page.status_code == 200
    assert not page.context["has_change_permission"]
    assert "deletelink" not in page.content.decode()
    assert operator.get(reverse("admin:tasks_taskstatuschange_add")).status_code == 403
    assert operator.get(reverse("admin:tasks_taskstatuschange_delete", args=[change.pk])).status_code == 403
    assert (
        operator.post(reverse("admin:tasks_taskstatuschange_delete", args=[change.pk]), {"post": "yes"}).status_code
        == 403
    )
    assert TaskStatusChange.objects.filter(pk=change.pk).exists()


def test_status_changes_have_no_bulk_delete(operator: Client, task: Task) -> None:
    response = operator.get(reverse("admin:tasks_taskstatuschange_changelist"))
    assert "delete_selected" not in response.content.decode()


def test_a_user_with_tasks_can_be_deleted(operator: Client, task: Task) -> None:
    owner = task.project.owner
    url = reverse("admin:accounts_user_delete", args=[owner.pk])
    assert operator.get(url).status_code == 200
    assert operator.post(url, {"post": "yes"}).status_code == 302
    assert not User.objects.filter(pk=owner.pk).exists()
    assert not Task.objects.exists()
    assert not TaskStatusChange.objects.exists()


def test_status_change_filters(operator: Client, task: Task) -> None:
    url = reverse("admin:tasks_taskstatuschange_changelist")
    response = operator.get(url, {"to_status__exact": "spec"})
    assert [(row.from_status, row.to_status) for row in response.context["cl"].result_list] == [("backlog", "spec")]
