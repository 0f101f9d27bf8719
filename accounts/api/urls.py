from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("register", views.RegisterApi.as_view(), name="auth-register"),
    path("login", views.LoginApi.as_view(), name="auth-login"),
    path("logout", views.LogoutApi.as_view(), name="auth-logout"),
    path("password", views.PasswordChangeApi.as_view(), name="auth-password"),
    path("token", views.TokenCreateApi.as_view(), name="auth-token"),
    path("tokens", views.TokenListApi.as_view(), name="auth-tokens"),
    path("tokens/<str:token_id>", views.TokenDetailApi.as_view(), name="auth-token-detail"),
    path("me", views.MeApi.as_view(), name="auth-me"),
]
