"""Request parsers. Kept apart from core.api: DRF imports the default parser classes
while it is still importing its own views, so this module must not import them."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from rest_framework import exceptions
from rest_framework.parsers import JSONParser
from rest_framework.settings import api_settings

BODY_TOO_DEEP = "JSON parse error - the document is nested too deeply."
NUL_IN_JSON = "Text in this JSON may not contain NUL (\\u0000) characters."
SURROGATE_IN_JSON = "Text in this JSON may not contain unpaired surrogate characters."
# json.loads joins an escaped surrogate pair into one character: any surrogate left in a
# decoded string is unpaired.
SURROGATE = re.compile("[\ud800-\udfff]")


def text_problem(value: Any) -> str | None:
    """Why a JSON value cannot be stored, or None: PostgreSQL refuses NUL in text and
    jsonb, and a lone surrogate cannot be encoded as UTF-8 at all (not even to send back
    an error message that quotes it)."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, str):
            if "\x00" in item:
                return NUL_IN_JSON
            if SURROGATE.search(item):
                return SURROGATE_IN_JSON
    return None


def refuse_unstorable_text(data: Any) -> None:
    """A 400 for a document with text no field could store: every string, key and value,
    at any depth (of known and unknown fields alike), so such text is never stored and
    never echoed. The error names the top-level field that holds it."""
    if not (problem := text_problem(data)):
        return
    if isinstance(data, dict) and not text_problem(list(data)):
        fields = {key: [issue] for key, value in data.items() if (issue := text_problem(value))}
        raise exceptions.ValidationError(fields)
    raise exceptions.ValidationError({api_settings.NON_FIELD_ERRORS_KEY: [problem]})


class SafeJSONParser(JSONParser):
    """JSONParser that answers a nesting bomb, NUL characters and lone surrogates with a 400.

    ``json`` raises RecursionError on deeply nested documents, which DRF's parser does
    not catch (it would be a 500). The body size is bounded before parsing: DRF reads
    JSON through ``request.body``, where Django enforces DATA_UPLOAD_MAX_MEMORY_SIZE.
    Text is checked here, once for every endpoint and field, rather than field by field:
    a choice field's error quotes the refused value, and a lone surrogate in it made the
    error itself impossible to send.
    """

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError(BODY_TOO_DEEP) from None
        refuse_unstorable_text(data)
        return data
