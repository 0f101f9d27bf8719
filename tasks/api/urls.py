from __future__ import annotations

from django.urls import path

from . import views

urlpatterns = [
    path("tasks", views.TaskListApi.as_view(), name="task-list"),
    path("tasks/<str:task_id>", views.TaskDetailApi.as_view(), name="task-detail"),
    path("tasks/<str:task_id>/status", views.TaskStatusApi.as_view(), name="task-status"),
]
