from __future__ import annotations

from django.templatetags.static import static
from django.urls import path
from django.views.generic import RedirectView

from . import views

app_name = "core"
urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    # Pages of ours name the SVG icon; the admin's (and every browser on its own) ask
    # for /favicon.ico.
    path("favicon.ico", RedirectView.as_view(url=static("img/favicon.svg"), permanent=True), name="favicon"),
]
