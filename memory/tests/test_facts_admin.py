"""Django admin: facts and goals, with links to their user and project."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import User
from memory.services.facts import fact_create, goal_create
from projects.models import Project

pytestmark = pytest.mark.django_db


@pytest.fixture
def operator(client: Client) -> Client:
    client.force_login(User.objects.create_superuser(email="root@example.com", password="root password"))
    return client


@pytest.mark.parametrize("model", ["fact", "goal"])
def test_changelist_links_users_and_projects(operator: Client, owner: User, project: Project, model: str) -> None:
    if model == "fact":
        obj = fact_create(user=owner, content="Likes tea", project=project)
    else:
        obj = goal_create(user=owner, text="Likes tea", project=project)
    html = operator.get(reverse(f"admin:memory_{model}_changelist"), {"q": "tea"}).content.decode()
    assert "Likes tea" in html
    assert f'href="{reverse("admin:accounts_user_change", args=[owner.pk])}">alice@example.com</a>' in html
    assert f'href="{reverse("admin:projects_project_change", args=[project.pk])}">' in html
    assert operator.get(reverse(f"admin:memory_{model}_change", args=[obj.pk])).status_code == 200


def test_complete_action_sets_the_time(operator: Client, owner: User) -> None:
    goal = goal_create(user=owner, text="Ship")
    response = operator.post(
        reverse("admin:memory_goal_changelist"), {"action": "complete_goals", "_selected_action": [goal.pk]}
    )
    assert response.status_code == 302
    goal.refresh_from_db()
    assert goal.status == "completed" and goal.completed_at is not None
