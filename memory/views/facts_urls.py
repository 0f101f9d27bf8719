from __future__ import annotations

from django.urls import path

from . import facts as views

urlpatterns = [
    path("", views.index, name="index"),
    path("facts", views.fact_create, name="fact_create"),
    path("facts/<id:fact_id>/edit", views.fact_edit, name="fact_edit"),
    path("facts/<id:fact_id>/delete", views.fact_delete, name="fact_delete"),
    path("goals", views.goal_create, name="goal_create"),
    path("goals/<id:goal_id>/edit", views.goal_edit, name="goal_edit"),
    path("goals/<id:goal_id>/complete", views.goal_complete, name="goal_complete"),
    path("goals/<id:goal_id>/delete", views.goal_delete, name="goal_delete"),
]
