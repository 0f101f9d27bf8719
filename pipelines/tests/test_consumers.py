"""Websockets through the real ASGI application (origin check, auth, routing)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from accounts.services import api_token_create
from core.consumers import CLOSE_CATCH_UP, CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from core.live import RESUBSCRIBED_MESSAGE_TYPE
from pipelines.events import CONSUMER_MESSAGE_TYPE, AgentLog, event_publish, project_group, task_group
from pipelines.models import RunEvent
from tests.factories import TaskFactory
from tests.sockets import open_socket

pytestmark = pytest.mark.django_db(transaction=True)


def _token_header(user) -> tuple[bytes, bytes]:
    _, raw = api_token_create(user=user, name="ws")
    return (b"authorization", f"Token {raw}".encode())


def _session_cookie(user) -> tuple[bytes, bytes]:
    client = Client()
    client.force_login(user)
    return (b"cookie", f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}".encode())


async def _connect(path: str, *headers: tuple[bytes, bytes]) -> tuple[WebsocketCommunicator, bool, int | None]:
    return await open_socket(path, *headers)


@pytest.fixture
def task(project):
    return TaskFactory(project=project)


def test_owner_gets_the_backlog_then_live_events_in_order(owner, task) -> None:
    first = event_publish(task=task, run=None, event=AgentLog(agent="planner", chunk="a"))
    second = event_publish(task=task, run=None, event=AgentLog(agent="planner", chunk="b"))
    header = _token_header(owner)

    async def scenario() -> list[dict]:
        communicator, connected, _ = await _connect(f"/ws/tasks/{task.pk}", header)
        assert connected
        received = [await communicator.receive_json_from(timeout=2) for _ in range(2)]
        layer = get_channel_layer()
        live = {"id": second.pk + 1000, "type": "phase-change", "data": {"phase": "coding"}}
        await layer.group_send(task_group(task.pk), {"type": CONSUMER_MESSAGE_TYPE, "event": live})
        # A replayed event arriving again live is not shown twice.
        stale = {"id": first.pk, "type": "agent-log", "data": {"agent": "planner", "chunk": "a"}}
        await layer.group_send(task_group(task.pk), {"type": CONSUMER_MESSAGE_TYPE, "event": stale})
        received.append(await communicator.receive_json_from(timeout=2))
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return received

    received = async_to_sync(scenario)()
    assert [m["id"] for m in received] == [first.pk, second.pk, second.pk + 1000]
    assert received[0] == {"id": first.pk, "type": "agent-log", "data": first.data}
    assert received[2]["type"] == "phase-change"


def test_last_event_id_replays_only_newer_events(owner, task) -> None:
    first = event_publish(task=task, run=None, event=AgentLog(agent="coder", chunk="1"))
    second = event_publish(task=task, run=None, event=AgentLog(agent="coder", chunk="2"))
    cookie = _session_cookie(owner)

    async def scenario() -> dict:
        communicator, connected, _ = await _connect(f"/ws/tasks/{task.pk}?last_event_id={first.pk}", cookie)
        assert connected
        message = await communicator.receive_json_from(timeout=2)
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        return message

    assert async_to_sync(scenario)()["id"] == second.pk


def test_other_users_task_is_refused_like_a_missing_one(other_user, task) -> None:
    event_publish(task=task, run=None, event=AgentLog(agent="planner", chunk="secret"))
    header = _token_header(other_user)

    async def scenario() -> tuple:
        _, theirs, code_theirs = await _connect(f"/ws/tasks/{task.pk}", header)
        _, missing, code_missing = await _connect("/ws/tasks/999999", header)
        _, garbage, code_garbage = await _connect("/ws/tasks/not-a-number", header)
        return theirs, code_theirs, missing, code_missing, garbage, code_garbage

    theirs, code_theirs, missing, code_missing, garbage, code_garbage = async_to_sync(scenario)()
    assert (theirs, missing, garbage) == (False, False, False)
    assert code_theirs == code_missing == code_garbage == CLOSE_NOT_FOUND


def test_anonymous_and_bad_tokens_are_refused(task) -> None:
    async def scenario() -> tuple:
        _, anon, anon_code = await _connect(f"/ws/tasks/{task.pk}")
        _, bad, bad_code = await _connect(f"/ws/tasks/{task.pk}", (b"authorization", b"Token nope"))
        return anon, anon_code, bad, bad_code

    assert async_to_sync(scenario)() == (False, CLOSE_UNAUTHENTICATED, False, CLOSE_UNAUTHENTICATED)


def test_frames_from_the_client_are_ignored_and_the_socket_stays_open(owner, task) -> None:
    header = _token_header(owner)

    async def scenario() -> None:
        communicator, connected, _ = await _connect(f"/ws/tasks/{task.pk}", header)
        assert connected
        await communicator.send_to(text_data="{not json")
        await communicator.send_to(bytes_data=b"\x00\xff")
        await communicator.send_to(text_data='{"type": "event.message", "event": {"id": 1}}')
        assert await communicator.receive_nothing(timeout=0.3)
        await get_channel_layer().group_send(
            task_group(task.pk), {"type": CONSUMER_MESSAGE_TYPE, "event": {"id": 5, "type": "ping-test", "data": {}}}
        )
        assert (await communicator.receive_json_from(timeout=2))["type"] == "ping-test"
        await communicator.disconnect()

    async_to_sync(scenario)()


def test_board_socket_gets_column_moves_of_its_project_only(owner, project, other_project, other_user) -> None:
    header = _token_header(owner)

    async def scenario() -> None:
        communicator, connected, _ = await _connect(f"/ws/projects/{project.pk}", header)
        assert connected
        layer = get_channel_layer()
        event = {"id": 7, "type": "task-status", "data": {"task_id": 1, "new_status": "spec"}}
        await layer.group_send(project_group(other_project.pk), {"type": CONSUMER_MESSAGE_TYPE, "event": event})
        assert await communicator.receive_nothing(timeout=0.3)
        await layer.group_send(project_group(project.pk), {"type": CONSUMER_MESSAGE_TYPE, "event": event})
        assert (await communicator.receive_json_from(timeout=2))["data"]["new_status"] == "spec"
        await communicator.disconnect()
        _, theirs, code = await _connect(f"/ws/projects/{other_project.pk}", header)
        assert (theirs, code) == (False, CLOSE_NOT_FOUND)

    async_to_sync(scenario)()


def test_a_client_that_falls_behind_still_gets_every_live_event(owner, task) -> None:
    # Channel layers drop, silently, what arrives for a consumer whose queue is full; at
    # the default capacity (100) a slow page lost live events (bench_events.py, 200 clients).
    header = _token_header(owner)
    sent = 600

    async def scenario() -> list[int]:
        communicator, connected, _ = await _connect(f"/ws/tasks/{task.pk}", header)
        assert connected
        layer = get_channel_layer()
        for number in range(1, sent + 1):  # faster than the consumer drains its queue
            event = {"id": number, "type": "agent-log", "data": {"agent": "coder", "chunk": "x"}}
            await layer.group_send(task_group(task.pk), {"type": CONSUMER_MESSAGE_TYPE, "event": event})
        received = [(await communicator.receive_json_from(timeout=5))["id"] for _ in range(sent)]
        await communicator.disconnect()
        return received

    assert async_to_sync(scenario)() == list(range(1, sent + 1))


def test_a_refused_socket_is_closed_with_its_code_after_the_handshake(other_user, task) -> None:
    """A browser sees a close code only on an accepted socket (a refused handshake is
    1006): refusals accept, then close at once with 4401/4404 and send nothing else."""
    from channels.testing import WebsocketCommunicator

    from config.asgi import application
    from tests.sockets import HOST, ORIGIN

    async def refusal(*headers: tuple[bytes, bytes]) -> tuple[bool, dict]:
        communicator = WebsocketCommunicator(application, f"/ws/tasks/{task.pk}", headers=[ORIGIN, HOST, *headers])
        accepted, _ = await communicator.connect()
        closing = await communicator.receive_output(timeout=1)
        await communicator.wait()
        return accepted, closing

    anonymous = async_to_sync(refusal)()
    not_theirs = async_to_sync(refusal)(_token_header(other_user))
    assert anonymous == (True, {"type": "websocket.close", "code": CLOSE_UNAUTHENTICATED})
    assert not_theirs == (True, {"type": "websocket.close", "code": CLOSE_NOT_FOUND})


def test_told_the_layer_lost_redis_a_task_socket_sends_the_stored_events_it_missed(owner, task) -> None:
    seen = event_publish(task=task, run=None, event=AgentLog(agent="coder", chunk="1"))
    header = _token_header(owner)

    async def scenario() -> list[dict]:
        communicator, connected, _ = await _connect(f"/ws/tasks/{task.pk}", header)
        assert connected
        assert (await communicator.receive_json_from(timeout=2))["id"] == seen.pk
        # Stored while the layer was not subscribed: never sent live.
        missed = await RunEvent.objects.acreate(task=task, run=None, type="phase-change", data={"status": "coding"})
        assert await communicator.receive_nothing(timeout=0.3)
        await get_channel_layer().group_send(task_group(task.pk), {"type": RESUBSCRIBED_MESSAGE_TYPE})
        received = [await communicator.receive_json_from(timeout=2)]
        assert await communicator.receive_nothing(timeout=0.3)
        await communicator.disconnect()
        assert received[0]["id"] == missed.pk
        return received

    assert [m["type"] for m in async_to_sync(scenario)()] == ["phase-change"]


def test_told_the_layer_lost_redis_a_board_socket_closes_for_the_page_to_reload(owner, project) -> None:
    header = _token_header(owner)

    async def scenario() -> dict:
        communicator, connected, _ = await _connect(f"/ws/projects/{project.pk}", header)
        assert connected
        await get_channel_layer().group_send(project_group(project.pk), {"type": RESUBSCRIBED_MESSAGE_TYPE})
        return await communicator.receive_output(timeout=2)

    assert async_to_sync(scenario)() == {"type": "websocket.close", "code": CLOSE_CATCH_UP}
