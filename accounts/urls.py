from __future__ import annotations

from django.urls import path

from . import views

app_name = "accounts"
urlpatterns = [
    path("register", views.register, name="register"),
    path("login", views.login_view, name="login"),
    path("logout", views.logout_view, name="logout"),
    path("password", views.password_change, name="password"),
    path("tokens", views.token_list, name="tokens"),
    path("tokens/<id:token_id>/revoke", views.token_revoke, name="token_revoke"),
]
