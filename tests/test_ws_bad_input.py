"""Bad input on the websockets: malformed and oversized frames, wrong ids, other users'
objects, odd replay positions. The socket closes cleanly or ignores the frame, and no
one ever receives another user's data."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings

from core.consumers import CLOSE_NOT_FOUND, CLOSE_UNAUTHENTICATED
from pipelines.events import AgentLog, event_publish
from tests.factories import TaskFactory
from tests.sockets import open_socket

pytestmark = pytest.mark.django_db(transaction=True)
HUGE_ID = "9" * 30
ID_PAST_MAX = str(2**63)  # one past the largest signed 64-bit id
ID_PAST_MIN = str(-(2**63) - 1)
SURROGATE_BYTES = "%ED%A0%80"  # "\ud800" as a client would send it: not UTF-8


def _token(user) -> tuple[bytes, bytes]:
    from accounts.services import api_token_create

    _, raw = api_token_create(user=user, name="ws")
    return (b"authorization", f"Token {raw}".encode())


async def _open(path: str, *headers: tuple[bytes, bytes]) -> tuple[WebsocketCommunicator, bool, int | None]:
    return await open_socket(path, *headers, timeout=3)


@pytest.fixture
def task(project):
    return TaskFactory(project=project)


@pytest.fixture
def foreign_task(other_project):
    foreign = TaskFactory(project=other_project, title="Bob's secret task")
    event_publish(task=foreign, run=None, event=AgentLog(agent="coder", chunk="bob-secret"))
    return foreign


def test_malformed_and_large_frames_are_ignored_and_the_socket_keeps_working(owner, task) -> None:
    header = _token(owner)

    async def scenario() -> list[dict]:
        communicator, connected, _ = await _open(f"/ws/tasks/{task.pk}", header)
        assert connected
        for frame in ("not json", "{", json.dumps({"type": 42, "data": [None]}), "[]" * 10, "x" * 900_000):
            await communicator.send_to(text_data=frame)
        await communicator.send_to(bytes_data=b"\x00\xff binary \x80")
        assert await communicator.receive_nothing(timeout=0.3)  # nothing echoed, nothing parsed
        await async_to_sync_free_publish(task)
        received = [await communicator.receive_json_from(timeout=3)]
        await communicator.disconnect()
        return received

    received = async_to_sync(scenario)()
    assert received[0]["type"] == "agent-log" and received[0]["data"]["chunk"] == "still here"


async def async_to_sync_free_publish(task) -> None:
    from channels.db import database_sync_to_async

    await database_sync_to_async(event_publish)(
        task=task, run=None, event=AgentLog(agent="planner", chunk="still here")
    )


@pytest.mark.parametrize(
    "object_id",
    ["abc", "-1", "0", "1.5", HUGE_ID, ID_PAST_MAX, ID_PAST_MIN, "%00", "1%00", SURROGATE_BYTES, "1%20OR%201=1"],
)
def test_wrong_ids_close_with_not_found(owner, object_id: str) -> None:
    header = _token(owner)

    async def scenario() -> list[tuple[bool, int | None]]:
        results = []
        for path in (f"/ws/tasks/{object_id}", f"/ws/projects/{object_id}", f"/ws/chat?project={object_id}"):
            communicator, connected, code = await _open(path, header)
            results.append((connected, code))
            await communicator.disconnect()
        return results

    assert async_to_sync(scenario)() == [(False, CLOSE_NOT_FOUND)] * 3


def test_other_users_objects_look_missing_and_leak_nothing(owner, foreign_task) -> None:
    header = _token(owner)

    async def scenario() -> list[tuple[bool, int | None]]:
        results = []
        for path in (
            f"/ws/tasks/{foreign_task.pk}",
            f"/ws/projects/{foreign_task.project_id}",
            f"/ws/chat?project={foreign_task.project_id}",
        ):
            communicator, connected, code = await _open(path, header)
            results.append((connected, code))
            if connected:
                assert await communicator.receive_nothing(timeout=0.3)
            await communicator.disconnect()
        return results

    assert async_to_sync(scenario)() == [(False, CLOSE_NOT_FOUND)] * 3


def test_anonymous_and_forged_credentials_are_refused(task) -> None:
    async def scenario() -> list[tuple[bool, int | None]]:
        results = []
        for headers in (
            [],
            [(b"authorization", b"Token not-a-token")],
            [(b"cookie", b"sessionid=forged")],
            [(b"cookie", b'sessionid="\\000forged-key"')],  # unquoted to a NUL
        ):
            for path in (f"/ws/tasks/{task.pk}", f"/ws/projects/{task.project_id}", "/ws/chat"):
                communicator, connected, code = await _open(path, *headers)
                results.append((connected, code))
                await communicator.disconnect()
        return results

    assert set(async_to_sync(scenario)()) == {(False, CLOSE_UNAUTHENTICATED)}


@pytest.mark.parametrize(
    "last_event_id", ["-5", "abc", "1e9", HUGE_ID, ID_PAST_MAX, ID_PAST_MIN, "%00", SURROGATE_BYTES, "", "9" * 5000]
)
def test_odd_replay_positions_never_crash_nor_replay_foreign_events(
    owner, task, foreign_task, last_event_id: str
) -> None:
    own = event_publish(task=task, run=None, event=AgentLog(agent="coder", chunk="mine"))
    header = _token(owner)

    async def scenario() -> list[dict]:
        communicator, connected, _ = await _open(f"/ws/tasks/{task.pk}?last_event_id={last_event_id}", header)
        assert connected
        received = []
        while not await communicator.receive_nothing(timeout=0.3):
            received.append(await communicator.receive_json_from())
        await communicator.disconnect()
        return received

    received = async_to_sync(scenario)()
    assert "bob-secret" not in json.dumps(received)
    # A position past every event replays nothing; any other odd value replays from the start.
    expected = [] if last_event_id in (HUGE_ID, ID_PAST_MAX) else [own.pk]
    assert [event["id"] for event in received] == expected


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.mark.slow
def test_daphne_closes_an_oversized_frame_and_serves_the_next_client(tmp_path: Path) -> None:
    """The real server: a frame over daphne's 1 MiB limit closes that socket only."""
    from websockets.exceptions import ConnectionClosed
    from websockets.sync.client import connect

    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings.base",
        "DEBUG": "true",
        "DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite3'}",
        "REDIS_URL": "",
        "EMBEDDED_WORKER": "false",
        "LOG_LEVEL": "WARNING",
    }
    base = settings.BASE_DIR
    subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=base, env=env, check=True, timeout=120)
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    server = subprocess.Popen(
        [sys.executable, "-m", "daphne", "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
        cwd=base, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                urllib.request.urlopen(url + "/accounts/login", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail("daphne did not start")
                time.sleep(0.1)

        def post(path: str, body: dict, token: str = "") -> dict:
            request = urllib.request.Request(
                url + path, json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            if token:
                request.add_header("Authorization", f"Token {token}")
            with urllib.request.urlopen(request, timeout=5) as response:
                return json.load(response)

        credentials = {"email": "ws@example.com", "password": "a long enough password"}
        post("/api/auth/register", credentials)
        token = post("/api/auth/token", credentials)["token"]
        task = post("/api/tasks", {"title": "Sockets"}, token)
        ws_url = f"ws://127.0.0.1:{port}/ws/tasks/{task['id']}"
        headers = {"Authorization": f"Token {token}"}

        # daphne drops such a connection (without a close frame), sometimes before the
        # frame is all written: that client is gone either way.
        with (
            connect(ws_url, additional_headers=headers, origin=url, max_size=None) as first,
            pytest.raises(ConnectionClosed),
        ):
            first.send("x" * (1024 * 1024 + 1))
            while True:
                first.recv(timeout=5)
        with connect(ws_url, additional_headers=headers, origin=url) as second:
            second.send("small and ignored")
            with pytest.raises(TimeoutError):
                second.recv(timeout=0.5)  # open, quiet, and still serving
    finally:
        server.terminate()
        server.wait(10)
