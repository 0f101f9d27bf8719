"""Admin for facts and goals: browse, search and correct what the agents remember."""

from __future__ import annotations

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.safestring import SafeString

from core.admin import admin_change_link
from core.exceptions import Conflict
from memory.models import Fact, Goal
from memory.services.facts import goal_complete


@admin.register(Fact)
class FactAdmin(admin.ModelAdmin):
    list_display = ("short_content", "user_link", "project_link", "source", "created_at")
    list_select_related = ("user", "project")
    list_filter = ("source", "created_at")
    search_fields = ("content", "user__email", "project__name")
    raw_id_fields = ("user", "project")
    readonly_fields = ("created_at", "updated_at")
    date_hierarchy = "created_at"

    @admin.display(description="Content", ordering="content")
    def short_content(self, fact: Fact) -> str:
        return str(fact)

    @admin.display(description="User", ordering="user__email")
    def user_link(self, fact: Fact) -> SafeString | str:
        return admin_change_link(fact.user)

    @admin.display(description="Project", ordering="project__name")
    def project_link(self, fact: Fact) -> SafeString | str:
        return admin_change_link(fact.project)


@admin.register(Goal)
class GoalAdmin(admin.ModelAdmin):
    list_display = ("short_text", "user_link", "project_link", "status", "deadline", "completed_at", "created_at")
    list_select_related = ("user", "project")
    list_filter = ("status", "source", "created_at", "completed_at")
    search_fields = ("text", "deadline", "user__email", "project__name")
    raw_id_fields = ("user", "project")
    # A goal is completed only through goal_complete, which also records when.
    readonly_fields = ("status", "completed_at", "created_at", "updated_at")
    date_hierarchy = "created_at"
    actions = ["complete_goals"]

    @admin.action(description="Complete the selected goals")
    def complete_goals(self, request: HttpRequest, queryset: QuerySet[Goal]) -> None:
        completed = 0
        for goal in queryset.filter(status=Goal.Status.ACTIVE):
            try:
                goal_complete(goal=goal)
            except Conflict:
                continue
            completed += 1
        self.message_user(request, f"{completed} goal(s) completed.", messages.SUCCESS)

    @admin.display(description="Goal", ordering="text")
    def short_text(self, goal: Goal) -> str:
        return str(goal)

    @admin.display(description="User", ordering="user__email")
    def user_link(self, goal: Goal) -> SafeString | str:
        return admin_change_link(goal.user)

    @admin.display(description="Project", ordering="project__name")
    def project_link(self, goal: Goal) -> SafeString | str:
        return admin_change_link(goal.project)
