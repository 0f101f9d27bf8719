"""The task page's pipeline panel, its actions, and the board card's run summary."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

import pytest
from django.urls import reverse

from accounts.models import User
from pipelines.events import AgentLog, event_publish
from pipelines.models import PipelineRun, RunEvent, RunStatus
from pipelines.review.services import FEEDBACK_REQUIRED
from pipelines.runs.costs import run_usage_add
from pipelines.runs.services import NO_API_KEY, RUN_ALREADY_ACTIVE, run_start, run_transition
from pipelines.views import CHANGES_REQUESTED, RUN_APPROVED, RUN_CANCELLED, RUN_RESTARTED, RUN_RESUMED, RUN_STARTED
from projects.models import Project
from tasks.models import Task, TaskStatus
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db

PLAN = [
    {"id": "s1", "title": "Parse the config file", "description": "Read TOML into a dataclass.", "order": 1},
    {"id": "s2", "title": "Cover parsing with tests", "description": "", "order": 2},
]
CHANGES = [
    {"file_path": "src/app/config.py", "content": "def load() -> dict:\n    return {}\n", "action": "create"},
    {"file_path": "tests/test_config.py", "content": "def test_load():\n    assert True\n", "action": "create"},
]
FINDING = {"file": "src/app/config.py", "line": 2, "severity": "major", "message": "load() ignores the path argument."}


@pytest.fixture(autouse=True)
def queued(monkeypatch) -> list[int]:
    """Jobs the services queue for a worker (no worker runs in these tests)."""
    jobs: list[int] = []
    monkeypatch.setattr("pipelines.runs.services._enqueue_advance", jobs.append)
    return jobs


@pytest.fixture(autouse=True)
def server_key(settings) -> None:
    settings.LLM_PROVIDER = "anthropic"
    settings.ANTHROPIC_API_KEY = "sk-test"
    settings.LLM_DEMO_MODE = False


@pytest.fixture
def task(project: Project) -> Task:
    return TaskFactory(project=project, title="Load the config", status=TaskStatus.BACKLOG)


@pytest.fixture
def owner_client(client, owner: User):
    client.force_login(owner)
    return client


@pytest.fixture
def other_client(client, other_user: User):
    client.force_login(other_user)
    return client


def walk(run: PipelineRun, *steps: tuple[str, dict[str, Any]]) -> PipelineRun:
    for status, fields in steps:
        run = run_transition(run=run, to_status=status, fields=fields, enqueue=False)
    return run


def log(task: Task, run: PipelineRun, agent: str, chunk: str) -> RunEvent:
    return event_publish(task=task, run=run, event=AgentLog(agent=agent, chunk=chunk))


@pytest.fixture
def working_run(task: Task, owner: User) -> PipelineRun:
    """Run 1, coding, with the Planner's log and plan."""
    run = run_start(task=task, user=owner)
    run = walk(run, (RunStatus.PLANNING, {}))
    log(task, run, "planner", "Reading the task")
    log(task, run, "planner", " and splitting it.\n")
    return walk(run, (RunStatus.CODING, {"plan": PLAN}))


@pytest.fixture
def awaiting_run(working_run: PipelineRun, task: Task) -> PipelineRun:
    """Run 1 after one failed and one passed review, awaiting approval, with cost."""
    run = working_run
    log(task, run, "coder", "Writing src/app/config.py\n")
    first = {"iteration": 1, "pass": False, "findings": [FINDING]}
    second = {"iteration": 2, "pass": True, "findings": []}
    run = walk(
        run,
        (RunStatus.REVIEWING, {"file_changes": CHANGES}),
        (RunStatus.FIXING, {"iteration": 1, "review_findings": [FINDING], "review_history": [first]}),
        (RunStatus.REVIEWING, {}),
    )
    log(task, run, "reviewer", "Checking the changes against the plan.\n")
    run_usage_add(run=run, input_tokens=12345, output_tokens=678, cost=Decimal("0.012345"))
    run.refresh_from_db()
    return walk(
        run,
        (
            RunStatus.AWAITING_APPROVAL,
            {"iteration": 2, "review_findings": [], "review_history": [first, second]},
        ),
    )


def detail_url(task: Task) -> str:
    return reverse("tasks:detail", args=[task.pk])


def page(client, task: Task) -> str:
    response = client.get(detail_url(task))
    assert response.status_code == 200
    return response.content.decode()


def pane(html: str, agent: str) -> str:
    match = re.search(rf'data-log-pane="{agent}".*?<pre[^>]*>(.*?)</pre>', html, re.S)
    assert match, f"no {agent} pane"
    return match.group(1)


def post_urls(task: Task, run: PipelineRun) -> list[tuple[str, dict[str, str]]]:
    return [
        (reverse("pipelines:start", args=[task.pk]), {}),
        (reverse("pipelines:cancel", args=[run.pk]), {}),
        (reverse("pipelines:retry", args=[run.pk]), {}),
        (reverse("pipelines:request_changes", args=[run.pk]), {"feedback": "Rename it."}),
        (reverse("pipelines:approve", args=[run.pk]), {}),
    ]


# --- Personas ------------------------------------------------------------------------------


def test_anonymous_is_sent_to_log_in_everywhere(client, task: Task, awaiting_run: PipelineRun) -> None:
    login = reverse("accounts:login")
    panel = client.get(reverse("pipelines:panel", args=[task.pk]), HTTP_HX_REQUEST="true")
    assert panel.status_code == 302
    assert panel["Location"].startswith(login)
    for url, data in post_urls(task, awaiting_run):
        response = client.post(url, data)
        assert response.status_code == 302, url
        assert response["Location"].startswith(login), url
    awaiting_run.refresh_from_db()
    assert awaiting_run.status == RunStatus.AWAITING_APPROVAL
    assert PipelineRun.objects.count() == 1


def test_other_user_gets_404_everywhere_and_changes_nothing(
    other_client, task: Task, awaiting_run: PipelineRun
) -> None:
    assert other_client.get(detail_url(task)).status_code == 404
    panel = other_client.get(reverse("pipelines:panel", args=[task.pk]), HTTP_HX_REQUEST="true")
    assert panel.status_code == 404
    for url, data in post_urls(task, awaiting_run):
        assert other_client.post(url, data).status_code == 404, url
        assert other_client.post(url, data, HTTP_HX_REQUEST="true").status_code == 404, url
    awaiting_run.refresh_from_db()
    assert awaiting_run.status == RunStatus.AWAITING_APPROVAL
    assert awaiting_run.feedback == ""
    assert PipelineRun.objects.count() == 1
    task.refresh_from_db()
    assert task.status == TaskStatus.REVIEW


def test_unknown_ids_are_404(owner_client) -> None:
    assert owner_client.post(reverse("pipelines:start", args=[999999])).status_code == 404
    assert owner_client.post(reverse("pipelines:approve", args=[999999])).status_code == 404
    assert owner_client.get(reverse("pipelines:panel", args=[999999]), HTTP_HX_REQUEST="true").status_code == 404


def test_actions_only_accept_post(owner_client, task: Task, awaiting_run: PipelineRun) -> None:
    for url, _ in post_urls(task, awaiting_run):
        assert owner_client.get(url).status_code == 405, url
    awaiting_run.refresh_from_db()
    assert awaiting_run.status == RunStatus.AWAITING_APPROVAL


# --- Start ---------------------------------------------------------------------------------


def test_start_without_any_api_key_says_how_to_add_one_and_creates_no_run(
    owner_client, task: Task, settings, queued: list[int]
) -> None:
    settings.ANTHROPIC_API_KEY = ""
    settings.LLM_DEMO_MODE = False
    response = owner_client.post(reverse("pipelines:start", args=[task.pk]), follow=True)
    assert response.redirect_chain[-1][0] == detail_url(task) + "#pipeline"
    html = response.content.decode()
    assert NO_API_KEY in html
    assert "Traceback" not in html
    assert not PipelineRun.objects.exists()
    assert queued == []
    # The panel says it up front too, and offers a field for the person's own key.
    assert "No Anthropic API key is configured on this server." in html
    assert 'name="api_key"' in html


def test_start_without_a_key_over_htmx_shows_the_message_in_the_panel(owner_client, task: Task, settings) -> None:
    settings.ANTHROPIC_API_KEY = ""
    response = owner_client.post(reverse("pipelines:start", args=[task.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<div id="pipeline-panel"')
    assert 'class="alert alert-error run-message" role="alert">' + NO_API_KEY in html
    assert not PipelineRun.objects.exists()


def test_start_creates_a_queued_run_and_the_page_shows_it(owner_client, task: Task, queued: list[int]) -> None:
    response = owner_client.post(reverse("pipelines:start", args=[task.pk]))
    assert response.status_code == 302
    assert response["Location"] == detail_url(task) + "#pipeline"
    run = PipelineRun.objects.get(task=task)
    assert run.status == RunStatus.QUEUED
    assert run.started_by is not None
    assert queued == [run.pk]
    html = page(owner_client, task)
    assert RUN_STARTED.format(number=1) in html
    assert "Run 1" in html
    assert 'class="stage stage-current" aria-current="step"' in html
    assert "Cancel run" in html
    assert "Start pipeline" not in html


def test_a_key_given_on_start_is_used_and_never_shown(owner_client, task: Task, settings) -> None:
    settings.ANTHROPIC_API_KEY = ""
    key = "sk-ant-own-key-0123456789"
    owner_client.post(reverse("pipelines:start", args=[task.pk]), {"api_key": key})
    run = PipelineRun.objects.get(task=task)
    assert run.api_key_encrypted
    assert key not in run.api_key_encrypted
    assert key not in page(owner_client, task)


def test_second_start_while_a_run_is_active_is_refused(owner_client, task: Task, working_run: PipelineRun) -> None:
    response = owner_client.post(reverse("pipelines:start", args=[task.pk]), follow=True)
    assert RUN_ALREADY_ACTIVE in response.content.decode()
    assert PipelineRun.objects.filter(task=task).count() == 1


# --- The person's actions ------------------------------------------------------------------


def test_cancel_stops_the_run(owner_client, task: Task, working_run: PipelineRun) -> None:
    response = owner_client.post(reverse("pipelines:cancel", args=[working_run.pk]), follow=True)
    working_run.refresh_from_db()
    assert working_run.status == RunStatus.CANCELLED
    html = response.content.decode()
    assert RUN_CANCELLED.format(number=1) in html
    assert "This run was cancelled" in html
    assert "stage stage-cancelled" in html


def test_cancel_of_a_finished_run_explains_why_not(owner_client, task: Task, working_run: PipelineRun) -> None:
    walk(working_run, (RunStatus.CANCELLED, {}))
    response = owner_client.post(reverse("pipelines:cancel", args=[working_run.pk]), follow=True)
    assert "A run that is cancelled cannot be cancelled." in response.content.decode()


def test_retry_resumes_a_paused_run_in_the_same_phase(
    owner_client, task: Task, working_run: PipelineRun, queued: list[int]
) -> None:
    paused = walk(working_run, (RunStatus.PAUSED, {"error": "Anthropic is overloaded (529)."}))
    html = page(owner_client, task)
    assert "Paused while coding" in html
    assert "Anthropic is overloaded (529)." in html
    assert reverse("pipelines:retry", args=[paused.pk]) in html
    assert "stage stage-paused" in html

    response = owner_client.post(reverse("pipelines:retry", args=[paused.pk]), follow=True)
    paused.refresh_from_db()
    assert paused.status == RunStatus.CODING
    assert paused.error == ""
    assert RUN_RESUMED.format(number=1, phase="coding") in response.content.decode()
    assert PipelineRun.objects.filter(task=task).count() == 1


def test_retry_after_a_failure_starts_a_new_run(owner_client, task: Task, working_run: PipelineRun) -> None:
    walk(working_run, (RunStatus.FAILED, {"error": "The coder gave invalid output twice."}))
    html = page(owner_client, task)
    assert "The run failed" in html
    assert "The coder gave invalid output twice." in html
    assert "stage stage-failed" in html

    response = owner_client.post(reverse("pipelines:retry", args=[working_run.pk]), follow=True)
    runs = list(PipelineRun.objects.filter(task=task).order_by("number"))
    assert [(run.number, run.status) for run in runs] == [(1, RunStatus.FAILED), (2, RunStatus.QUEUED)]
    assert RUN_RESTARTED.format(number=2) in response.content.decode()


def test_request_changes_sends_the_run_back_to_the_coder(owner_client, task: Task, awaiting_run: PipelineRun) -> None:
    url = reverse("pipelines:request_changes", args=[awaiting_run.pk])
    response = owner_client.post(url, {"feedback": "  Read the path argument.  "}, follow=True)
    awaiting_run.refresh_from_db()
    assert awaiting_run.status == RunStatus.CODING
    assert awaiting_run.feedback == "Read the path argument."
    assert CHANGES_REQUESTED in response.content.decode()
    task.refresh_from_db()
    assert task.status == TaskStatus.BUILDING


def test_request_changes_without_feedback_is_refused(owner_client, awaiting_run: PipelineRun) -> None:
    url = reverse("pipelines:request_changes", args=[awaiting_run.pk])
    response = owner_client.post(url, {"feedback": "   "}, follow=True)
    assert FEEDBACK_REQUIRED in response.content.decode()
    awaiting_run.refresh_from_db()
    assert awaiting_run.status == RunStatus.AWAITING_APPROVAL


def test_approve_finishes_the_run_and_the_task(owner_client, task: Task, awaiting_run: PipelineRun) -> None:
    response = owner_client.post(reverse("pipelines:approve", args=[awaiting_run.pk]), follow=True)
    awaiting_run.refresh_from_db()
    assert awaiting_run.status == RunStatus.APPROVED
    task.refresh_from_db()
    assert task.status == TaskStatus.DONE
    html = response.content.decode()
    assert RUN_APPROVED in html
    assert "Start a new run" in html
    assert html.count("stage stage-done") == 6


def test_approve_over_htmx_answers_with_the_panel_and_the_new_task_status(
    owner_client, task: Task, awaiting_run: PipelineRun
) -> None:
    response = owner_client.post(reverse("pipelines:approve", args=[awaiting_run.pk]), HTTP_HX_REQUEST="true")
    assert response.status_code == 200
    html = response.content.decode()
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="pipeline-panel"')
    assert 'data-run-status="approved"' in html
    # The task's status pills elsewhere on the page are swapped out of band.
    assert re.search(r'id="task-status-header" hx-swap-oob="true">.*?Done</span>', html, re.S)
    # The success message arrives as a toast.
    assert 'hx-swap-oob="beforeend:#toasts"' in html
    assert RUN_APPROVED in html


def test_approving_twice_says_why_not(owner_client, awaiting_run: PipelineRun) -> None:
    url = reverse("pipelines:approve", args=[awaiting_run.pk])
    owner_client.post(url)
    response = owner_client.post(url, HTTP_HX_REQUEST="true")
    assert "A run that is approved cannot become approved." in response.content.decode()


# --- The panel's content -------------------------------------------------------------------


def test_panel_partial_is_for_htmx_and_a_plain_visit_goes_to_the_task(
    owner_client, task: Task, awaiting_run: PipelineRun
) -> None:
    url = reverse("pipelines:panel", args=[task.pk])
    plain = owner_client.get(url)
    assert plain.status_code == 302
    assert plain["Location"] == detail_url(task) + "#pipeline"
    partial = owner_client.get(url, HTTP_HX_REQUEST="true")
    assert partial.status_code == 200
    html = partial.content.decode()
    assert html.lstrip().startswith('<div id="pipeline-panel"')
    assert "Awaiting approval" in html
    assert 'id="pipeline-diff" hx-swap-oob="true"' in html
    # The log panes are not part of a refresh: the page keeps their text.
    assert "data-log-pane" not in html


def test_task_page_shows_the_whole_run(owner_client, task: Task, awaiting_run: PipelineRun) -> None:
    html = page(owner_client, task)
    # Persisted agent logs, one pane per agent, chunks joined in order.
    assert "Reading the task and splitting it.\n" in pane(html, "planner")
    assert "Writing src/app/config.py" in pane(html, "coder")
    assert "Checking the changes against the plan." in pane(html, "reviewer")
    # The socket resumes after the newest event the page was built from.
    last_id = RunEvent.objects.filter(task=task).latest("id").pk
    assert f'data-last-event-id="{last_id}"' in html
    assert f'data-ws-path="/ws/tasks/{task.pk}"' in html
    # Status, iteration, tokens and cost.
    assert "Awaiting approval" in html
    assert "Review 2 of 3" in html
    assert "12,345" in html
    assert "678" in html
    assert "$0.0123" in html
    assert "claude-sonnet-4-6" in html
    assert "scripted demo model" not in html
    # Subtasks from the Planner and the review history with severities.
    assert "Parse the config file" in html
    assert "Read TOML into a dataclass." in html
    assert "Cover parsing with tests" in html
    assert "Review 1" in html
    assert '<span class="severity severity-major">major</span>' in html
    assert "load() ignores the path argument." in html
    assert "src/app/config.py:2" in html
    # The actions a run awaiting approval allows.
    for name in ("approve", "request_changes", "retry", "cancel"):
        assert reverse(f"pipelines:{name}", args=[awaiting_run.pk]) in html, name


def test_task_page_shows_the_diff(owner_client, task: Task, awaiting_run: PipelineRun) -> None:
    html = page(owner_client, task)
    assert "2 files changed" in html
    assert '<span class="diff-plus">+4</span>' in html
    assert '<span class="diff-minus">−0</span>' in html
    # The file tree, nested by folder, links to each file's diff.
    assert re.search(r'<span class="tree-label">.*?src</span>\s*<ul class="tree">.*?app</span>', html, re.S)
    assert html.count('class="tree-file"') == 2
    # Rows with line numbers and Pygments-highlighted code.
    assert '<tr class="diff-row diff-hunk">' in html
    # (Awaiting approval, each new-file line has a "+" to comment on it: test_line_comments.py.)
    assert re.search(
        r'<tr class="diff-row diff-add" data-new-line="1"><td class="ln"></td>'
        r'<td class="ln"><button [^>]*>\+</button>1</td>'
        r'<td class="diff-code"><span class="k">def</span><span class="w"> </span><span class="nf">load</span>',
        html,
    )
    assert "Python" in html


def test_file_content_and_agent_text_are_escaped(owner_client, task: Task, working_run: PipelineRun) -> None:
    evil = "<script>alert('x')</script>"
    log(task, working_run, "coder", evil)
    walk(
        working_run,
        (
            RunStatus.REVIEWING,
            {"file_changes": [{"file_path": "page.html", "content": evil + "\n", "action": "create"}]},
        ),
    )
    html = page(owner_client, task)
    assert evil not in html
    assert "&lt;script&gt;" in html
    assert "&lt;/script&gt;" in pane(html, "coder")


def test_unsafe_paths_are_listed_as_refused(owner_client, task: Task, working_run: PipelineRun) -> None:
    changes = [*CHANGES, {"file_path": "../etc/passwd", "content": "x", "action": "create"}]
    walk(working_run, (RunStatus.REVIEWING, {"file_changes": changes}))
    html = page(owner_client, task)
    assert "1 change refused" in html
    assert "<code>../etc/passwd</code>" in html
    assert "Paths may not leave the repository" in html


def test_demo_mode_labels_the_model(owner_client, task: Task, working_run: PipelineRun, settings) -> None:
    settings.LLM_DEMO_MODE = True
    assert "scripted demo model" in page(owner_client, task)


def test_a_task_without_runs_offers_start(owner_client, task: Task) -> None:
    html = page(owner_client, task)
    assert reverse("pipelines:start", args=[task.pk]) in html
    assert "Start pipeline" in html
    assert "data-agent-logs hidden" in html
    assert "No Anthropic API key" not in html


def test_logs_of_several_runs_are_labelled_by_run(owner_client, task: Task, working_run: PipelineRun, owner) -> None:
    walk(working_run, (RunStatus.CANCELLED, {}))
    second = walk(run_start(task=task, user=owner), (RunStatus.PLANNING, {}))
    log(task, second, "planner", "Second plan.")
    planner = pane(page(owner_client, task), "planner")
    assert planner.index("Run 1") < planner.index("Reading the task") < planner.index("Run 2")
    assert planner.index("Run 2") < planner.index("Second plan.")


# --- Board ---------------------------------------------------------------------------------


def test_board_card_shows_total_cost_and_run_status(
    owner_client, project: Project, task: Task, awaiting_run: PipelineRun, owner
) -> None:
    walk(awaiting_run, (RunStatus.CANCELLED, {}))
    second = walk(run_start(task=task, user=owner), (RunStatus.PLANNING, {}))
    run_usage_add(run=second, input_tokens=0, output_tokens=0, cost=Decimal("0.0077"))
    assert second.number == 2
    TaskFactory(project=project, title="Never run")
    html = owner_client.get(reverse("tasks:board")).content.decode()
    card = re.search(rf'data-task-id="{task.pk}".*?</li>', html, re.S)
    assert card
    assert '<span class="card-cost"' in card.group(0)
    assert "$0.0200" in card.group(0)  # 0.012345 + 0.0077
    assert "planning</span>" in card.group(0)
    assert html.count('class="card-cost"') == 1


def test_board_query_count_is_constant_with_runs(
    owner_client, project: Project, owner, django_assert_max_num_queries
) -> None:
    for n in range(20):
        task = TaskFactory(project=project)
        run = run_start(task=task, user=owner)
        run_usage_add(run=run, input_tokens=0, output_tokens=0, cost=Decimal("0.001") * (n + 1))
    # One more than a board without queued runs: the places in line of all its cards.
    with django_assert_max_num_queries(5):
        response = owner_client.get(reverse("tasks:board"))
    html = response.content.decode()
    assert html.count('class="card-cost"') == 20
    assert "$0.0200" in html
    assert html.count("queued · ") == 20
    assert "queued · 1st in line</span>" in html
    assert "queued · 20th in line</span>" in html


def test_board_page_opens_the_project_socket(owner_client, project: Project) -> None:
    html = owner_client.get(reverse("tasks:board")).content.decode()
    assert f'data-ws-path="/ws/projects/{project.pk}"' in html
    assert "js/board_live.js" in html


def test_each_phase_of_an_agent_is_labelled_in_its_pane(owner_client, task: Task, awaiting_run: PipelineRun) -> None:
    # The fixture's coder wrote while coding; the reviewer wrote during review 2 only.
    html = page(owner_client, task)
    fixing = walk(
        awaiting_run,
        (RunStatus.CODING, {"feedback": "Read the path.", "iteration": 0}),
    )
    log(task, fixing, "coder", "Now reading the path.\n")
    coder = pane(page(owner_client, task), "coder")
    assert re.search(r'<b class="log-run">Coding</b><span class="log-segment" data-phase="\d+">Writing', coder)
    assert coder.index("Writing src/app/config.py") < coder.rindex("Coding</b>") < coder.index("Now reading the path.")
    assert '<b class="log-run">Review 2</b>' in pane(html, "reviewer")


def test_requested_changes_are_shown_and_reviews_after_them_marked(
    owner_client, task: Task, awaiting_run: PipelineRun
) -> None:
    history = [*awaiting_run.review_history, {"iteration": 1, "pass": True, "findings": []}]
    run = walk(
        awaiting_run,
        (RunStatus.CODING, {"feedback": "Read the <path> argument.", "iteration": 0}),
        (RunStatus.REVIEWING, {}),
    )
    html = page(owner_client, task)
    assert "Your requested changes" in html
    assert "Read the &lt;path&gt; argument." in html
    walk(run, (RunStatus.AWAITING_APPROVAL, {"iteration": 1, "review_history": history}))
    html = page(owner_client, task)
    reviews = re.findall(r'<span class="review-name">(Review \d)</span>\s*(<span class="review-round")?', html)
    # Numbered over the whole run, newest first: a request for changes restarts the fix
    # rounds, not the reviews' numbers.
    assert [(name, bool(marked)) for name, marked in reviews] == [
        ("Review 3", True),
        ("Review 2", False),
        ("Review 1", False),
    ]


def test_a_paused_run_opens_the_pane_it_stopped_in(owner_client, task: Task, working_run: PipelineRun) -> None:
    log(task, working_run, "coder", "[Overloaded. Retrying in 2 s.]\n")
    walk(working_run, (RunStatus.PAUSED, {"error": "Overloaded."}))
    html = page(owner_client, task)
    coder = re.search(r'<details class="log-pane[^"]*" data-log-pane="coder"( open)?>.*?data-state="(\w+)"', html, re.S)
    assert coder
    assert coder.group(1) == " open"
    assert coder.group(2) == "paused"
    planner = re.search(
        r'<details class="log-pane[^"]*" data-log-pane="planner"( open)?>.*?data-state="(\w+)"', html, re.S
    )
    assert planner
    assert planner.group(1) is None
    assert planner.group(2) == "done"


def test_a_run_over_the_limit_says_it_is_queued_and_waits_for_a_place(
    owner_client, owner: User, project: Project, task: Task, queued: list[int], settings
) -> None:
    from pipelines.views import RUN_QUEUED

    settings.RUNS_AT_ONCE_PER_USER = 1
    working = run_start(task=TaskFactory(project=project, title="Working"), user=owner)
    run_transition(run=working, to_status=RunStatus.PLANNING)

    owner_client.post(reverse("pipelines:start", args=[task.pk]))

    html = page(owner_client, task)
    assert RUN_QUEUED.format(number=1) in html and RUN_STARTED.format(number=1) not in html
    assert "waiting for a place to run" in html and "waiting for a worker" not in html


def test_a_run_free_to_start_says_it_started(owner_client, task: Task, queued: list[int]) -> None:
    owner_client.post(reverse("pipelines:start", args=[task.pk]))
    html = page(owner_client, task)
    assert RUN_STARTED.format(number=1) in html and "waiting for a place" not in html
