"""Django admin: projects."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import User
from projects.models import Project
from projects.services import LAST_PROJECT
from tasks.models import Task, TaskStatusChange
from tasks.services import task_create
from tests.factories import ProjectFactory, TaskFactory

pytestmark = pytest.mark.django_db


@pytest.fixture
def superuser() -> User:
    return User.objects.create_superuser(email="root@example.com", password="root password")


@pytest.fixture
def operator(client: Client, superuser: User) -> Client:
    client.force_login(superuser)
    return client


def test_changelist_links_owners_and_tasks(operator: Client, project: Project, other_project: Project) -> None:
    TaskFactory.create_batch(3, project=project)
    response = operator.get(reverse("admin:projects_project_changelist"))
    assert response.status_code == 200
    html = response.content.decode()
    assert f'href="{reverse("admin:accounts_user_change", args=[project.owner_id])}">alice@example.com</a>' in html
    tasks_url = reverse("admin:tasks_task_changelist")
    assert f'href="{tasks_url}?project__id__exact={project.pk}">3 tasks</a>' in html
    assert f'href="{tasks_url}?project__id__exact={other_project.pk}">0 tasks</a>' in html
    # The link narrows the task list to the project's tasks.
    tasks = operator.get(tasks_url, {"project__id__exact": project.pk})
    assert tasks.status_code == 200
    assert {task.pk for task in tasks.context["cl"].result_list} == set(
        Task.objects.filter(project=project).values_list("pk", flat=True)
    )


def test_changelist_query_count_does_not_grow(operator: Client, owner: User, django_assert_max_num_queries) -> None:
    url = reverse("admin:projects_project_changelist")
    for project in ProjectFactory.create_batch(30, owner=owner):
        TaskFactory(project=project)
    with django_assert_max_num_queries(12):
        assert operator.get(url).status_code == 200


def test_search_and_filters(operator: Client, project: Project, other_project: Project) -> None:
    url = reverse("admin:projects_project_changelist")
    by_owner = operator.get(url, {"q": "bob@"})
    assert list(by_owner.context["cl"].result_list) == [other_project]
    by_name = operator.get(url, {"q": "alice's"})
    assert list(by_name.context["cl"].result_list) == [project]
    assert operator.get(url, {"created_at__gte": "2000-01-01 00:00:00+00:00"}).status_code == 200


def test_change_page(operator: Client, project: Project) -> None:
    TaskFactory(project=project)
    response = operator.get(reverse("admin:projects_project_change", args=[project.pk]))
    assert response.status_code == 200
    assert f"?project__id__exact={project.pk}" in response.content.decode()
    assert 'name="instructions"' in response.content.decode()
    saved = operator.post(
        reverse("admin:projects_project_change", args=[project.pk]),
        {
            "owner": project.owner_id,
            "name": "Renamed",
            "description": "New",
            "instructions": "Use tabs.",
            "lesson_half_life_hours": "24",
            "runs_at_once": "3",
        },
    )
    assert saved.status_code == 302
    project.refresh_from_db()
    assert (project.name, project.description, project.instructions) == ("Renamed", "New", "Use tabs.")
    # The operator left "distil lessons" unticked: off; the half-life is the one given.
    assert (project.learn_distil, project.lesson_half_life_hours) == (False, 24.0)
    assert project.runs_at_once == 3


def test_add_page(operator: Client, owner: User, project: Project) -> None:
    url = reverse("admin:projects_project_add")
    assert operator.get(url).status_code == 200
    assert operator.post(url, {"owner": owner.pk, "name": "From the admin"}).status_code == 302
    assert Project.objects.filter(owner=owner, name="From the admin").exists()
    duplicate = operator.post(url, {"owner": owner.pk, "name": "FROM THE ADMIN"})
    assert duplicate.status_code == 200
    assert Project.objects.filter(owner=owner).count() == 2


def test_a_users_last_project_cannot_be_deleted(operator: Client, project: Project) -> None:
    change_url = reverse("admin:projects_project_change", args=[project.pk])
    assert "deletelink" not in operator.get(change_url).content.decode()
    url = reverse("admin:projects_project_delete", args=[project.pk])
    for response in (operator.get(url), operator.post(url, {"post": "yes"})):
        assert response.status_code == 302
        assert response["Location"] == change_url
    assert Project.objects.filter(pk=project.pk).exists()
    followed = operator.get(url, follow=True)
    assert LAST_PROJECT in [str(message) for message in followed.context["messages"]]


def test_a_project_can_be_deleted_when_the_owner_has_another(operator: Client, project: Project) -> None:
    ProjectFactory(owner=project.owner)
    task_create(project=project, title="Goes too")  # with its audit row
    assert "deletelink" in operator.get(reverse("admin:projects_project_change", args=[project.pk])).content.decode()
    url = reverse("admin:projects_project_delete", args=[project.pk])
    assert operator.get(url).status_code == 200
    assert operator.post(url, {"post": "yes"}).status_code == 302
    assert not Project.objects.filter(pk=project.pk).exists()
    assert not Task.objects.exists()
    assert not TaskStatusChange.objects.exists()


def test_bulk_delete_is_not_offered(operator: Client, project: Project) -> None:
    response = operator.get(reverse("admin:projects_project_changelist"))
    assert "delete_selected" not in response.content.decode()
