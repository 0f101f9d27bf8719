from __future__ import annotations

from django.urls import path

from . import facts

urlpatterns = [
    path("facts", facts.FactListApi.as_view(), name="memory-fact-list"),
    path("facts/<str:fact_id>", facts.FactDetailApi.as_view(), name="memory-fact-detail"),
    path("goals", facts.GoalListApi.as_view(), name="memory-goal-list"),
    # Before goals/<goal_id>, which would otherwise take "complete" for an id.
    path("goals/complete", facts.GoalCompleteMatchingApi.as_view(), name="memory-goal-complete-matching"),
    path("goals/<str:goal_id>", facts.GoalDetailApi.as_view(), name="memory-goal-detail"),
    path("goals/<str:goal_id>/complete", facts.GoalCompleteApi.as_view(), name="memory-goal-complete"),
    path("context", facts.MemoryContextApi.as_view(), name="memory-context"),
]
