from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.admin import UserAdmin as BaseUserAdmin
from django.contrib.auth.forms import AdminUserCreationForm
from django.contrib.auth.forms import UserChangeForm as BaseUserChangeForm
from django.core.exceptions import ValidationError
from django.forms import ModelForm
from django.http import HttpRequest
from django.utils.safestring import SafeString

from core.admin import admin_change_link
from core.exceptions import RateLimited

from .models import ApiToken, User
from .services import AuthenticationFailed, client_address, user_authenticate
from .signals import user_save_new

ADMIN_LOGIN_WAIT = "{message} (about {seconds} s)"


class AdminLoginForm(AdminAuthenticationForm):
    """The admin's sign-in, through the one credential check of the login page and the
    API (``user_authenticate``): the same throttle and counters, so failures here count
    there and the other way round, and while an address is held back even the right
    password is refused, with the throttle's message saying to wait."""

    def clean(self) -> dict[str, Any]:
        email, password = self.cleaned_data.get("username"), self.cleaned_data.get("password")
        if email is None or not password:
            return self.cleaned_data
        address = client_address(self.request) if self.request is not None else "unknown"
        try:
            user = user_authenticate(request=self.request, client_address=address, email=email, password=password)
        except RateLimited as refused:
            message = ADMIN_LOGIN_WAIT.format(message=refused.message, seconds=refused.retry_after)
            raise ValidationError(message, code=refused.code) from None
        except AuthenticationFailed:
            raise self.get_invalid_login_error() from None
        self.user_cache = user
        self.confirm_login_allowed(user)
        return self.cleaned_data


admin.site.login_form = AdminLoginForm


class UserCreationForm(AdminUserCreationForm):
    """The admin's add form, with the email as the login."""

    class Meta:
        model = User
        fields = ("email", "display_name")


class UserChangeForm(BaseUserChangeForm):
    class Meta:
        model = User
        fields = "__all__"


class ApiTokenInline(admin.TabularInline):
    """A user's tokens: revoke one by deleting it. Raw tokens are never stored."""

    model = ApiToken
    fields = ("name", "prefix", "created_at", "last_used_at")
    readonly_fields = fields
    extra = 0
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(User)
class UserAdmin(BaseUserAdmin):
    """Users; the apps above add their own columns (projects/admin.py: the projects)."""

    form = UserChangeForm
    add_form = UserCreationForm
    list_display: tuple[str, ...] = ("email", "display_name", "is_staff", "is_active", "date_joined")
    list_filter = ("is_staff", "is_superuser", "is_active", "groups", "date_joined")
    search_fields = ("email", "display_name")
    ordering = ("email",)
    readonly_fields = ("last_login", "date_joined")
    fieldsets = (
        (None, {"fields": ("email", "password")}),
        ("Profile", {"fields": ("display_name",)}),
        ("Permissions", {"fields": ("is_active", "is_staff", "is_superuser", "groups", "user_permissions")}),
        ("Important dates", {"fields": ("last_login", "date_joined")}),
    )
    add_fieldsets = (
        (
            None,
            {
                "classes": ("wide",),
                "fields": ("email", "display_name", "usable_password", "password1", "password2"),
            },
        ),
    )

    def get_inlines(
        self, request: HttpRequest, obj: User | None
    ) -> list[type[admin.options.InlineModelAdmin[Any, Any]]]:
        return [ApiTokenInline] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: User, form: ModelForm[User], change: bool) -> None:
        if change:
            super().save_model(request, obj, form, change)
        else:
            # Like registration and createsuperuser (user_created: every account starts
            # with a board).
            user_save_new(user=obj)


@admin.register(ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens are made through the API (the raw value is shown once, there); here they
    can be renamed or revoked."""

    list_display = ("prefix", "name", "user_link", "created_at", "last_used_at")
    list_filter = ("created_at", "last_used_at")
    list_select_related = ("user",)
    search_fields = ("name", "prefix", "user__email")
    fields = ("user", "name", "prefix", "digest", "created_at", "last_used_at")
    readonly_fields = ("user", "prefix", "digest", "created_at", "last_used_at")
    date_hierarchy = "created_at"

    @admin.display(description="User", ordering="user__email")
    def user_link(self, token: ApiToken) -> SafeString | str:
        return admin_change_link(token.user)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False
