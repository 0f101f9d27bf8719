"""The REST API and its OpenAPI schema."""

from __future__ import annotations

# --- REST API -----------------------------------------------------------------------

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        # Token first: its WWW-Authenticate header turns "not logged in" into a 401.
        "accounts.authentication.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["core.parsers.SafeJSONParser"],
    "DEFAULT_PAGINATION_CLASS": "core.pagination.PageNumberPagination",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "core.exception_handlers.api_exception_handler",
    "PAGE_SIZE": 50,
}

SPECTACULAR_SETTINGS = {
    "TITLE": "AutoCoder API",
    "DESCRIPTION": (
        "Kanban tasks planned, coded and reviewed by AI agents. Authenticate with "
        "`Authorization: Token <token>` (POST /api/auth/token) or the session cookie."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "COMPONENT_SPLIT_REQUEST": True,
    # Swagger UI assets are served by the app itself: the docs work offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "ENUM_NAME_OVERRIDES": {
        "TaskStatusEnum": "tasks.models.TaskStatus",
        "RunStatusEnum": "pipelines.models.RunStatus",
        "MemorySourceEnum": "memory.models.semantic.MemorySource",
        # The facts' and goals' enum kept its name from before memories had a source.
        "SourceEnum": "memory.models.facts.Fact.Source",
    },
}
