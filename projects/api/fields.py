"""A request body's ``project``: one of the requesting user's projects."""

from __future__ import annotations

from typing import Any, cast

from django.db.models import QuerySet
from rest_framework import serializers
from rest_framework.fields import empty

from accounts.models import User
from accounts.selectors import request_user
from core.exceptions import NotFound
from projects.models import Project
from projects.selectors import PROJECT_NOT_FOUND, project_get_for_user, project_list_for_user


class OwnedProjectField(serializers.PrimaryKeyRelatedField[Project]):
    """A project id whose validated value is the Project, looked up with
    ``project_get_for_user``: someone else's project reads exactly like one that does not
    exist ("Project not found."). Anything but a whole number is refused in an
    IntegerField's words, an empty string included.

    The user is the serializer context's ``user``, else its ``request``'s.
    """

    default_error_messages = {"does_not_exist": PROJECT_NOT_FOUND}

    def __init__(self, **kwargs: Any) -> None:
        kwargs.setdefault("queryset", Project.objects.all())  # narrowed to the user's by get_queryset
        kwargs.setdefault("pk_field", serializers.IntegerField())
        super().__init__(**kwargs)

    def _user(self) -> User:
        user = self.context.get("user")
        return user if isinstance(user, User) else request_user(self.context["request"])

    def get_queryset(self) -> QuerySet[Project]:
        return project_list_for_user(user=self._user())

    def run_validation(self, data: Any = empty) -> Any:
        # Not RelatedField's: it reads "" as null, where an id field says it is no number.
        return serializers.Field.run_validation(self, data)

    def to_internal_value(self, data: Any) -> Project:
        pk = cast(serializers.IntegerField, self.pk_field).to_internal_value(data)
        try:
            return project_get_for_user(user=self._user(), project_id=pk)
        except NotFound:
            self.fail("does_not_exist", pk_value=pk)
