"""The Repository page's environment settings: the setup script, the tests' network."""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError

from ...models import Repository

MAX_SETUP_SCRIPT = 20_000


def environment_settings_update(
    *, repository: Repository, setup_script: str | None = None, tests_network: bool | None = None
) -> Repository:
    fields: dict[str, Any] = {}
    if setup_script is not None:
        text = setup_script.replace("\r\n", "\n").strip()
        if len(text) > MAX_SETUP_SCRIPT:
            raise ValidationError({"setup_script": [f"At most {MAX_SETUP_SCRIPT:,} characters."]})
        if "\x00" in text:
            raise ValidationError({"setup_script": ["The script contains a NUL character."]})
        fields["setup_script"] = text
    if tests_network is not None:
        fields["tests_network"] = bool(tests_network)
    for name, value in fields.items():
        setattr(repository, name, value)
    if fields:
        repository.save(update_fields=[*fields, "updated_at"])
    return repository
