"""The ASGI application: HTTP and websockets, served by daphne.

In the embedded mode (no REDIS_URL) this process is also the Celery worker and beat:
they start here because only the server process imports this module (not manage.py
commands, not ``celery``, and under ``runserver`` only the autoreloaded child).
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.base")
# Set up Django before anything imports models (auth middleware, consumers).
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from django.conf import settings  # noqa: E402

from accounts.channels_auth import TokenAuthMiddleware  # noqa: E402
from core.websocket_origin import SameOriginValidator  # noqa: E402

from .routing import unknown_path_route, websocket_urlpatterns  # noqa: E402

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        # The Origin check refuses every page but ours (same host and port as the Host
        # header, or CSRF_TRUSTED_ORIGINS): the session cookie alone would let any site —
        # or anything else served on another port of this host — open a socket as the
        # logged-in user.
        "websocket": SameOriginValidator(
            # Session login first; scripts without a cookie may send "Authorization: Token …".
            AuthMiddlewareStack(TokenAuthMiddleware(URLRouter([*websocket_urlpatterns, unknown_path_route])))
        ),
    }
)

if settings.EMBEDDED_WORKER:
    from .embedded import start_embedded_worker

    start_embedded_worker()
