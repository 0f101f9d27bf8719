"""core.consumers.LiveConsumer, under every websocket (task, board, chat): the keepalive
ping, and a client's messages ignored."""

from __future__ import annotations

import json

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator

from accounts.models import User
from accounts.services import api_token_create
from config.asgi import application
from core.consumers import LiveConsumer
from projects.models import Project
from tests.factories import TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)
ORIGIN = (b"origin", b"http://127.0.0.1")
HOST = (b"host", b"127.0.0.1")


def test_every_socket_pings_while_idle_and_ignores_what_the_client_sends(
    owner: User, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(LiveConsumer, "keepalive_seconds", 0.05)
    task = TaskFactory(project=project)
    _, raw = api_token_create(user=owner, name="ws")
    headers = [ORIGIN, HOST, (b"authorization", f"Token {raw}".encode())]
    paths = [f"/ws/tasks/{task.pk}", f"/ws/projects/{project.pk}", "/ws/chat", f"/ws/chat?project={project.pk}"]

    async def scenario(path: str) -> list[dict]:
        communicator = WebsocketCommunicator(application, path, headers=headers)
        connected, _ = await communicator.connect()
        assert connected, path
        await communicator.send_to(text_data="not json {")
        await communicator.send_to(text_data='{"type": "chat-message", "data": {}}')
        received = [await communicator.receive_json_from(timeout=2) for _ in range(2)]
        await communicator.disconnect()
        return received

    for path in paths:
        assert async_to_sync(scenario)(path) == [{"type": "ping", "data": {}}] * 2, path


def test_a_group_event_goes_out_as_the_publisher_encoded_it_without_a_connection_clean_up(
    owner: User, project: Project, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The JSON is encoded once by the publisher (core.live.event_message) and the same text
    goes to every socket; forwarding it skips Channels' per-message close_old_connections
    (a hop to the sync thread per socket and event). Connecting still cleans up."""
    import channels.consumer
    from channels.layers import get_channel_layer

    from chat.events import CONSUMER_MESSAGE_TYPE as CHAT_MESSAGE_TYPE
    from chat.events import chat_group
    from core.live import event_message
    from pipelines.events import CONSUMER_MESSAGE_TYPE, task_group

    clean_ups: list[str] = []
    real_clean_up = channels.consumer.aclose_old_connections

    async def counted_clean_up() -> None:
        clean_ups.append("clean-up")
        await real_clean_up()

    monkeypatch.setattr(channels.consumer, "aclose_old_connections", counted_clean_up)
    task = TaskFactory(project=project)
    _, raw = api_token_create(user=owner, name="ws")
    headers = [ORIGIN, HOST, (b"authorization", f"Token {raw}".encode())]
    event = {"id": 7, "type": "agent-log", "data": {"chunk": "é"}}
    message = event_message(CONSUMER_MESSAGE_TYPE, event)
    assert json.loads(message["text"]) == event
    # Encoded otherwise than the consumer would: the socket must send this very text.
    message["text"] = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
    chat_message = event_message(CHAT_MESSAGE_TYPE, {"type": "chat-token", "data": {"text": "hi"}})

    async def scenario() -> tuple[list[str], list[str]]:
        pages = [WebsocketCommunicator(application, f"/ws/tasks/{task.pk}", headers=headers) for _ in range(2)]
        chat = WebsocketCommunicator(application, f"/ws/chat?project={project.pk}", headers=headers)
        for communicator in [*pages, chat]:
            assert (await communicator.connect())[0]
        after_connect = len(clean_ups)
        await get_channel_layer().group_send(task_group(task.pk), message)
        await get_channel_layer().group_send(chat_group(owner.pk, project.pk), chat_message)
        texts = [await page.receive_from(timeout=2) for page in [*pages, chat]]
        forwarding_clean_ups = clean_ups[after_connect:]
        for communicator in [*pages, chat]:
            await communicator.disconnect()
        return texts, forwarding_clean_ups

    texts, forwarding_clean_ups = async_to_sync(scenario)()
    assert texts == [message["text"], message["text"], chat_message["text"]]
    assert forwarding_clean_ups == []
    assert clean_ups, "connecting (which reads the database) still cleans up"
