from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("projects", views.ProjectListApi.as_view(), name="project-list"),
    path("projects/<str:project_id>", views.ProjectDetailApi.as_view(), name="project-detail"),
]
