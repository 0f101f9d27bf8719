from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fake_anthropic import FakeAnthropicServer


@pytest.fixture(scope="session")
def _fake_llm_server() -> Iterator[FakeAnthropicServer]:
    with FakeAnthropicServer() as server:
        yield server


@pytest.fixture
def fake_llm(_fake_llm_server: FakeAnthropicServer, settings) -> Iterator[FakeAnthropicServer]:
    """The fake Anthropic API, reset, with the app pointed at it."""
    _fake_llm_server.reset()
    settings.ANTHROPIC_BASE_URL = _fake_llm_server.url
    settings.ANTHROPIC_API_KEY = "sk-ant-test-key"
    settings.LLM_PROVIDER = "anthropic"
    settings.LLM_RETRY_DELAYS = [0.01, 0.02, 0.04]
    settings.LLM_TIMEOUT_SECONDS = 5
    yield _fake_llm_server
    assert _fake_llm_server.pending == 0, "the test scripted replies that were never asked for"
