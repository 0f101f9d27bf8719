"""Request parsers. Kept apart from core.api: DRF imports the default parser classes
while it is still importing its own views, so this module must not import them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rest_framework import exceptions
from rest_framework.parsers import JSONParser

BODY_TOO_DEEP = "JSON parse error - the document is nested too deeply."


class SafeJSONParser(JSONParser):
    """JSONParser that answers a nesting bomb with a 400.

    ``json`` raises RecursionError on deeply nested documents, which DRF's parser does
    not catch (it would be a 500). The body size is bounded before parsing: DRF reads
    JSON through ``request.body``, where Django enforces DATA_UPLOAD_MAX_MEMORY_SIZE.
    """

    def parse(self, stream: Any, media_type: str | None = None, parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise exceptions.ParseError(BODY_TOO_DEEP) from None
