from __future__ import annotations

from django.urls import path

from . import semantic as views

urlpatterns = [
    path("recall", views.recall, name="recall"),
    path("recall/results", views.recall_results, name="recall_results"),
    path("recall/add", views.recall_add, name="recall_add"),
    path("recall/<id:memory_id>/reinforce", views.recall_reinforce, name="recall_reinforce"),
    path("recall/<id:memory_id>/delete", views.recall_delete, name="recall_delete"),
    path("recall/<id:memory_id>/pin", views.recall_pin, name="recall_pin"),
    path("recall/<id:memory_id>/share", views.recall_share, name="recall_share"),
    path("recall/<id:memory_id>/generalise", views.recall_generalise, name="recall_generalise"),
    path("recall/<id:memory_id>/edit", views.recall_edit, name="recall_edit"),
]
