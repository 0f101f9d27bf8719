"""core.consumers.LiveConsumer, under every websocket (task, board, chat): the keepalive
ping, and a client's messages ignored."""

from __future__ import annotations

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
