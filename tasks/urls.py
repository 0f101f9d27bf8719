from __future__ import annotations

from django.urls import path

from . import views

app_name = "tasks"
urlpatterns = [
    path("", views.board, name="board"),
    path("tasks/new", views.task_create, name="create"),
    path("tasks/<id:task_id>", views.task_detail, name="detail"),
    path("tasks/<id:task_id>/card", views.task_card, name="card"),
    path("tasks/<id:task_id>/activity", views.task_activity, name="activity"),
    path("tasks/<id:task_id>/move", views.task_move, name="move"),
    path("tasks/<id:task_id>/delete", views.task_delete, name="delete"),
]
