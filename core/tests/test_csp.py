"""The Content-Security-Policy: sent on every response, and nothing in the templates that
it would refuse (inline scripts, styles and event handlers)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client

pytestmark = pytest.mark.django_db

# What a policy without 'unsafe-inline' blocks in a template.
INLINE = {
    "inline <script>": re.compile(r"<script(?![^>]*\bsrc=)[^>]*>", re.IGNORECASE),
    "<style> element": re.compile(r"<style[\s>]", re.IGNORECASE),
    "style attribute": re.compile(r"\sstyle\s*=", re.IGNORECASE),
    "event handler attribute": re.compile(r"\son[a-z]+\s*=\s*[\"']", re.IGNORECASE),
    "javascript: URL": re.compile(r"javascript:", re.IGNORECASE),
}


def _templates() -> list[Path]:
    roots = [Path(settings.BASE_DIR) / "templates", *Path(settings.BASE_DIR).glob("*/templates")]
    return sorted(path for root in roots for path in root.rglob("*.html"))


def test_the_templates_have_nothing_inline_for_the_policy_to_refuse() -> None:
    templates = _templates()
    assert len(templates) > 20
    found = [
        f"{path.relative_to(settings.BASE_DIR)}: {what}"
        for path in templates
        for what, pattern in INLINE.items()
        # Django comments may mention what they avoid.
        if pattern.search(re.sub(r"{#.*?#}|{% comment %}.*?{% endcomment %}", "", path.read_text(), flags=re.DOTALL))
    ]
    assert found == []


@pytest.mark.parametrize("url", ["/accounts/login", "/api/docs", "/api/docs?script=", "/api/auth/me", "/healthz"])
def test_every_response_carries_the_policy(url: str) -> None:
    response = Client().get(url)
    assert response["Content-Security-Policy"] == " ".join(settings.CONTENT_SECURITY_POLICY.split())
    assert "'unsafe-inline'" not in response["Content-Security-Policy"]


def test_a_page_for_a_user_carries_it_too(client, owner) -> None:
    client.force_login(owner)
    response = client.get("/")
    assert response.status_code == 200
    assert "script-src 'self'" in response["Content-Security-Policy"]
    # htmx is told not to add its indicator styles as an inline <style>.
    assert '"includeIndicatorStyles": false' in response.content.decode()


def test_the_api_docs_load_their_start_up_script_as_a_file() -> None:
    html = Client().get("/api/docs").content.decode()
    assert '<script src="/api/docs?script="></script>' in html
    assert not INLINE["inline <script>"].search(html)
    assert not INLINE["<style> element"].search(html)
    script = Client().get("/api/docs?script=")
    assert script.status_code == 200
    assert script["Content-Type"].startswith("application/javascript")
    assert "SwaggerUIBundle" in script.content.decode()


def test_report_only_sends_the_other_header(settings) -> None:
    settings.CONTENT_SECURITY_POLICY_REPORT_ONLY = True
    response = Client().get("/accounts/login")
    assert "Content-Security-Policy" not in response
    assert "script-src 'self'" in response["Content-Security-Policy-Report-Only"]
