from __future__ import annotations

from rest_framework import serializers

from accounts.models import ApiToken, User
from core.api import StrictCharField, StrictEmailField

PASSWORD_MIN_LENGTH = 8
PASSWORD_MAX_LENGTH = 128
# Accounts made outside registration (createsuperuser, the admin) may have longer
# passwords; a login only needs a bound on how much is hashed.
LOGIN_PASSWORD_MAX_LENGTH = 1024
EMAIL_MAX_LENGTH = 254


class UserSerializer(serializers.ModelSerializer[User]):
    class Meta:
        model = User
        fields = ("id", "email", "display_name")
        read_only_fields = fields


class RegisterSerializer(serializers.Serializer):
    email = StrictEmailField(max_length=EMAIL_MAX_LENGTH)
    password = StrictCharField(
        min_length=PASSWORD_MIN_LENGTH,
        max_length=PASSWORD_MAX_LENGTH,
        trim_whitespace=False,
        write_only=True,
        style={"input_type": "password"},
    )
    display_name = StrictCharField(max_length=100, allow_blank=True, default="")


class LoginSerializer(serializers.Serializer):
    # Not an EmailField: a malformed address is one more wrong credential, answered
    # like every other one.
    email = StrictCharField(max_length=EMAIL_MAX_LENGTH)
    password = StrictCharField(
        max_length=LOGIN_PASSWORD_MAX_LENGTH, trim_whitespace=False, write_only=True, style={"input_type": "password"}
    )


class TokenCreateSerializer(LoginSerializer):
    name = StrictCharField(max_length=100, allow_blank=True, default="", help_text="A label to tell tokens apart.")


class TokenSerializer(serializers.Serializer):
    token = serializers.CharField(
        read_only=True, help_text="Send as `Authorization: Token <token>`. Shown once: only its digest is stored."
    )


class PasswordChangeSerializer(serializers.Serializer):
    current_password = StrictCharField(
        max_length=LOGIN_PASSWORD_MAX_LENGTH, trim_whitespace=False, write_only=True, style={"input_type": "password"}
    )
    new_password = StrictCharField(
        min_length=PASSWORD_MIN_LENGTH,
        max_length=PASSWORD_MAX_LENGTH,
        trim_whitespace=False,
        write_only=True,
        style={"input_type": "password"},
    )


class ApiTokenSerializer(serializers.ModelSerializer[ApiToken]):
    expires_at = serializers.DateTimeField(read_only=True, allow_null=True, help_text="Null: never expires.")
    current = serializers.SerializerMethodField(help_text="This request was authenticated with this token.")

    class Meta:
        model = ApiToken
        fields = ("id", "name", "prefix", "created_at", "last_used_at", "expires_at", "current")
        read_only_fields = fields

    def get_current(self, token: ApiToken) -> bool:
        current = self.context.get("current_token")
        return current is not None and current.pk == token.pk
