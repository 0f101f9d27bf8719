"""OwnedProjectField: the one ``project`` of a request body (tasks, facts, goals,
memories), in the words an IntegerField plus "Project not found." used before it."""

from __future__ import annotations

import pytest
from rest_framework import serializers

from accounts.models import User
from projects.api.fields import OwnedProjectField
from projects.models import Project
from projects.selectors import PROJECT_NOT_FOUND

pytestmark = pytest.mark.django_db

NOT_A_NUMBER = "A valid integer is required."


class _Body(serializers.Serializer):
    project = OwnedProjectField()


class _OptionalBody(serializers.Serializer):
    project = OwnedProjectField(required=False, allow_null=True, default=None)


def _errors(serializer_class: type[serializers.Serializer], user: User, value: object) -> list[str]:
    body = serializer_class(data={"project": value}, context={"user": user})
    assert not body.is_valid()
    return [str(message) for message in body.errors["project"]]


def test_ones_own_project_is_the_validated_value(owner: User, project: Project) -> None:
    for value in (project.pk, str(project.pk)):
        body = _Body(data={"project": value}, context={"user": owner})
        assert body.is_valid(), body.errors
        assert body.validated_data["project"] == project


def test_someone_elses_and_missing_projects_read_the_same(owner: User, other_project: Project) -> None:
    for value in (other_project.pk, 999_999, 0, -3, 2**70):
        assert _errors(_Body, owner, value) == [PROJECT_NOT_FOUND], value


def test_anything_but_a_whole_number_is_refused_as_an_integer_field_would(owner: User) -> None:
    for value in ("", "abc", True, 1.5, [], {}):
        assert _errors(_Body, owner, value) == [NOT_A_NUMBER], value
        assert _errors(_OptionalBody, owner, value) == [NOT_A_NUMBER], value
    assert _errors(_Body, owner, None) == ["This field may not be null."]


def test_null_or_nothing_where_allowed(owner: User) -> None:
    for data in ({"project": None}, {}):
        body = _OptionalBody(data=data, context={"user": owner})
        assert body.is_valid(), body.errors
        assert body.validated_data["project"] is None
