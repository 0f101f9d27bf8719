"""The /memory/ page: facts and goals by hand, the context preview; personas."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from accounts.models import User
from memory.models import Fact, Goal
from memory.services.facts import fact_create, goal_complete, goal_create
from projects.models import Project

pytestmark = pytest.mark.django_db

INDEX = reverse("memory:index")


@pytest.fixture
def owner_browser(client: Client, owner: User) -> Client:
    client.force_login(owner)
    return client


@pytest.fixture
def other_browser(owner: User, other_user: User) -> Client:
    browser = Client()
    browser.force_login(other_user)
    return browser


@pytest.fixture
def fact(owner: User) -> Fact:
    return fact_create(user=owner, content="Likes tea")


@pytest.fixture
def goal(owner: User) -> Goal:
    return goal_create(user=owner, text="Ship v2", deadline="Friday")


def _urls(fact: Fact, goal: Goal) -> list[tuple[str, str]]:
    return [
        ("get", reverse("memory:fact_edit", args=[fact.pk])),
        ("post", reverse("memory:fact_edit", args=[fact.pk])),
        ("post", reverse("memory:fact_delete", args=[fact.pk])),
        ("get", reverse("memory:goal_edit", args=[goal.pk])),
        ("post", reverse("memory:goal_edit", args=[goal.pk])),
        ("post", reverse("memory:goal_complete", args=[goal.pk])),
        ("post", reverse("memory:goal_delete", args=[goal.pk])),
    ]


def test_anonymous_is_sent_to_login(client: Client, fact: Fact, goal: Goal) -> None:
    calls = [
        ("get", INDEX),
        ("post", reverse("memory:fact_create")),
        ("post", reverse("memory:goal_create")),
        *_urls(fact, goal),
    ]
    for method, url in calls:
        response = getattr(client, method)(url, {"content": "x", "text": "x"})
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("accounts:login") + "?next=")
    assert Fact.objects.count() == 1 and Goal.objects.get().status == "active"


def test_other_user_gets_404(other_browser: Client, fact: Fact, goal: Goal) -> None:
    for method, url in _urls(fact, goal):
        assert getattr(other_browser, method)(url, {"content": "Mine", "text": "Mine"}).status_code == 404, url
    fact.refresh_from_db()
    goal.refresh_from_db()
    assert (fact.content, goal.text, goal.status) == ("Likes tea", "Ship v2", "active")
    page = other_browser.get(INDEX).content.decode()
    assert "Likes tea" not in page and "Ship v2" not in page


def test_page_shows_facts_goals_links_and_preview(owner_browser: Client, fact: Fact, goal: Goal) -> None:
    goal_complete(goal=goal_create(user=fact.user, text="Old goal"))
    response = owner_browser.get(INDEX)
    assert response.status_code == 200
    html = response.content.decode()
    for text in ("Likes tea", "Ship v2", "Deadline: Friday", "Old goal", "Completed", "Prompt context preview"):
        assert text in html
    assert 'href="/memory/recall"' in html and 'href="/memory/agents/"' in html
    assert "[Memory Context]\nFacts: Likes tea\nActive Goals:\n- Ship v2 (deadline: Friday)" in html
    assert "css/memory_facts.css" in html


def test_empty_page(owner_browser: Client) -> None:
    html = owner_browser.get(INDEX).content.decode()
    assert "No facts yet" in html and "nothing to remember yet" in html


def test_add_fact_and_goal(owner_browser: Client, owner: User, project: Project) -> None:
    response = owner_browser.post(reverse("memory:fact_create"), {"content": " Uses Postgres ", "project": project.pk})
    assert response.status_code == 302
    fact = Fact.objects.get()
    assert (fact.user, fact.content, fact.project, fact.source) == (owner, "Uses Postgres", project, "manual")
    response = owner_browser.post(reverse("memory:goal_create"), {"text": "Go live", "deadline": "June", "project": ""})
    assert response.status_code == 302
    goal = Goal.objects.get()
    assert (goal.text, goal.deadline, goal.project) == ("Go live", "June", None)


@pytest.mark.parametrize("content", ["", "   ", "x" * 2001])
def test_add_fact_rejects_bad_input(owner_browser: Client, content: str) -> None:
    response = owner_browser.post(reverse("memory:fact_create"), {"content": content})
    assert response.status_code == 400
    assert "field-error" in response.content.decode()
    assert not Fact.objects.exists()


def test_add_to_someone_elses_project_is_refused(owner_browser: Client, other_project: Project) -> None:
    response = owner_browser.post(reverse("memory:goal_create"), {"text": "x", "project": other_project.pk})
    assert response.status_code == 400
    assert not Goal.objects.exists()


def test_edit_complete_and_delete(owner_browser: Client, fact: Fact, goal: Goal) -> None:
    assert owner_browser.get(reverse("memory:fact_edit", args=[fact.pk])).status_code == 200
    response = owner_browser.post(reverse("memory:fact_edit", args=[fact.pk]), {"content": "Likes coffee"})
    assert response.status_code == 302
    fact.refresh_from_db()
    assert fact.content == "Likes coffee"
    assert owner_browser.post(reverse("memory:fact_edit", args=[fact.pk]), {"content": " "}).status_code == 400

    assert owner_browser.get(reverse("memory:goal_edit", args=[goal.pk])).status_code == 200
    response = owner_browser.post(reverse("memory:goal_edit", args=[goal.pk]), {"text": "Ship v3", "deadline": ""})
    assert response.status_code == 302
    goal.refresh_from_db()
    assert (goal.text, goal.deadline) == ("Ship v3", "")

    assert owner_browser.post(reverse("memory:goal_complete", args=[goal.pk])).status_code == 302
    goal.refresh_from_db()
    assert goal.status == "completed" and goal.completed_at is not None
    # A second click is harmless.
    assert owner_browser.post(reverse("memory:goal_complete", args=[goal.pk])).status_code == 302

    assert owner_browser.post(reverse("memory:fact_delete", args=[fact.pk])).status_code == 302
    assert owner_browser.post(reverse("memory:goal_delete", args=[goal.pk])).status_code == 302
    assert not Fact.objects.exists() and not Goal.objects.exists()


def test_deletes_and_completes_are_post_only(owner_browser: Client, fact: Fact, goal: Goal) -> None:
    assert owner_browser.get(reverse("memory:fact_delete", args=[fact.pk])).status_code == 405
    assert owner_browser.get(reverse("memory:goal_complete", args=[goal.pk])).status_code == 405


def test_buttons_work_with_htmx(owner_browser: Client, goal: Goal) -> None:
    html = owner_browser.get(INDEX).content.decode()
    assert f'hx-post="{reverse("memory:goal_complete", args=[goal.pk])}"' in html
    response = owner_browser.post(reverse("memory:goal_complete", args=[goal.pk]), HTTP_HX_REQUEST="true", follow=True)
    assert response.status_code == 200
    assert 'id="memory-page"' in response.content.decode()
    assert "Completed: Ship v2" in response.content.decode()
