from __future__ import annotations

from django.urls import path

from . import views

app_name = "core"
urlpatterns = [
    path("healthz", views.healthz, name="healthz"),
    # Pages of ours name the SVG icon; the admin's (and every browser on its own) ask
    # for /favicon.ico.
    path("favicon.ico", views.favicon, name="favicon"),
]
