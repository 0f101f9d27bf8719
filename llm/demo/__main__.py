"""``python -m llm.demo --port 8090``: serve the scripted demo model in the foreground."""

from __future__ import annotations

import argparse
import contextlib
import functools

from llm.demo.model import DEMO_MODEL_LABEL, default_reply
from llm.demo.server import DemoModelServer


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m llm.demo",
        description="Serve the scripted demo model as an Anthropic Messages API and OpenAI Chat Completions.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8090)
    parser.add_argument("--delay", type=float, default=0.04, help="seconds between streamed chunks")
    args = parser.parse_args(argv)
    server = DemoModelServer(args.host, args.port, fallback=functools.partial(default_reply, delay=args.delay))
    print(
        f"Anthropic Messages API ({DEMO_MODEL_LABEL}) on {server.url}, Chat Completions on {server.url}/v1",
        flush=True,
    )
    with contextlib.suppress(KeyboardInterrupt):
        server.serve_forever()
    server.server_close()


if __name__ == "__main__":
    main()
