"""The forges' webhook deliveries: no session or token, the repository's secret signs
them (pipelines.pull_requests.webhooks.pull_request_webhook checks it). Thin: the body and the
headers go to the service as they came; Django's DATA_UPLOAD_MAX_MEMORY_SIZE caps the
body (a larger one is a 400)."""

from __future__ import annotations

from django.http import HttpRequest, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from core.converters import parse_id
from core.exception_handlers import error_body
from core.exceptions import ApplicationError
from pipelines.pull_requests.webhooks import pull_request_webhook


@csrf_exempt
@require_POST
def forge_webhook(request: HttpRequest, repository_id: str) -> JsonResponse:
    try:
        outcome = pull_request_webhook(
            repository_id=parse_id(repository_id), body=request.body, headers=request.headers
        )
    except ApplicationError as error:
        return JsonResponse(error_body(error.message, error.code, error.extra), status=error.status_code)
    return JsonResponse({"outcome": outcome})
