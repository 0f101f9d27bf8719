from __future__ import annotations

from django.urls import path

from . import views

app_name = "projects"
urlpatterns = [
    path("", views.project_list, name="list"),
    path("new", views.project_create, name="create"),
    path("<id:project_id>/edit", views.project_edit, name="edit"),
    path("<id:project_id>/delete", views.project_delete, name="delete"),
]
