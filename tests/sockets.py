"""Opening the app's websockets in tests, through the real ASGI application (origin
check, login, routing)."""

from __future__ import annotations

from channels.testing import WebsocketCommunicator

from config.asgi import application

ORIGIN = (b"origin", b"http://127.0.0.1")
# The page's own origin is the server's Host (core.websocket_origin): a browser sends both.
HOST = (b"host", b"127.0.0.1")
# How long a socket that was just accepted may take to send its immediate close.
REFUSAL_WAIT = 0.05


async def open_socket(
    path: str, *headers: tuple[bytes, bytes], timeout: float = 1
) -> tuple[WebsocketCommunicator, bool, int | None]:
    """(communicator, open, close code). The server refuses a socket by accepting it and
    closing it at once with its code (core.consumers.LiveConsumer, so that a browser
    learns the code): that reads here as (False, code), like a handshake refused with
    that code."""
    communicator = WebsocketCommunicator(application, path, headers=[ORIGIN, HOST, *headers])
    connected, code = await communicator.connect(timeout=timeout)
    if connected and not await communicator.receive_nothing(timeout=REFUSAL_WAIT):
        # Peek, not take: a socket that stays open keeps its first message for the test.
        first = communicator.output_queue._queue[0]  # type: ignore[attr-defined]
        if first.get("type") == "websocket.close":
            await communicator.receive_output()
            return communicator, False, first.get("code")
    return communicator, connected, code
