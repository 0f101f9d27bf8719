"""Missing or not yours: the selectors raise core.exceptions.NotFound, and one middleware
turns it into the 404 page for every page (htmx requests included); the API keeps its
own error body."""

from __future__ import annotations

import pytest
from django.test import Client, RequestFactory
from django.urls import reverse

from accounts.models import User
from accounts.services import api_token_create
from core.exceptions import NotFound
from core.middleware import NotFoundMiddleware
from memory.services.semantic import memory_create
from projects.models import Project
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

NOT_FOUND_PAGE = "We couldn’t find that page"


@pytest.fixture
def browser(client: Client, owner: User) -> Client:
    client.force_login(owner)
    return client


def _is_the_404_page(response) -> bool:  # type: ignore[no-untyped-def]
    return response.status_code == 404 and NOT_FOUND_PAGE in response.content.decode()


def test_someone_elses_objects_on_any_page_are_the_404_page(
    browser: Client, other_user: User, other_project: Project
) -> None:
    task = TaskFactory(project=other_project)
    memory, _, _ = memory_create(owner=other_user, content="Their secret")
    token, _ = api_token_create(user=other_user, name="theirs")
    gets = [
        reverse("projects:edit", args=[other_project.pk]),
        reverse("repos:page", args=[other_project.pk]),
        reverse("tasks:detail", args=[task.pk]),
        f"{reverse('tasks:board')}?project={other_project.pk}",
        f"{reverse('chat:page')}?project={other_project.pk}",
    ]
    posts = [
        reverse("memory:recall_reinforce", args=[memory.pk]),
        reverse("memory:recall_delete", args=[memory.pk]),
        reverse("memory:notes-promote", args=["coder", 999999]),
        reverse("accounts:token_revoke", args=[token.pk]),
    ]
    for url in gets:
        assert _is_the_404_page(browser.get(url)), url
        assert _is_the_404_page(browser.get(url, HTTP_HX_REQUEST="true")), url
    for url in posts:
        assert _is_the_404_page(browser.post(url)), url
        assert _is_the_404_page(browser.post(url, HTTP_HX_REQUEST="true")), url


def test_the_api_keeps_its_own_not_found_body(owner_client, other_project: Project) -> None:
    response = owner_client.get(f"/api/projects/{other_project.pk}")
    assert response.status_code == 404
    assert response.json() == {"message": "Project not found.", "code": "not_found", "extra": {}}


def test_the_middleware_leaves_api_paths_and_other_errors_alone() -> None:
    middleware = NotFoundMiddleware(lambda request: None)  # type: ignore[arg-type,return-value]
    factory = RequestFactory()
    assert middleware.process_exception(factory.get("/api/tasks/1"), NotFound("Task not found.")) is None
    assert middleware.process_exception(factory.get("/tasks/1"), ValueError("boom")) is None
    response = middleware.process_exception(factory.get("/tasks/1"), NotFound("Task not found."))
    assert response is not None and response.status_code == 404
