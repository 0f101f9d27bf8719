"""A project's environment variables and secrets: set, delete, list (writes and reads
in one small module), and what the sandbox and the output masker get from them.

Every value is encrypted at rest (core.crypto), secret or not: a plain one is shown to
its owner again, a secret one never is — not in a page, the API or the admin — and is
masked (core.masking) in whatever the commands that got it print. The variables reach
the project's test command only (repos/verify.py, the Claude CLI's nested test
sandbox), never a model's own process.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from django.core.exceptions import ValidationError
from django.db import transaction

from core.crypto import decrypt_secret, encrypt_secret
from core.exceptions import NotFound
from core.masking import MIN_SECRET_LENGTH, OutputMasker

from .models import ProjectVariable

if TYPE_CHECKING:
    from projects.models import Project

MAX_NAME_LENGTH = 128
MAX_VALUE_LENGTH = 8192
MAX_VARIABLES_PER_PROJECT = 100
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# What the sandbox sets itself (core/sandbox_bwrap.py ``base_environment``) and what a shell
# keeps for itself: the sandbox's value would win anyway, so a project's would be
# silently ignored — refused, saying so.
SANDBOX_OWNED_NAMES = frozenset(
    {
        "PATH",
        "HOME",
        "TMPDIR",
        "USER",
        "LOGNAME",
        "LANG",
        "LC_ALL",
        "PWD",
        "OLDPWD",
        "SHELL",
        "CI",
        "PYTHONDONTWRITEBYTECODE",
        "PYTHONUNBUFFERED",
    }
)
# Names that change how programs start before the test command's first line runs:
# the dynamic loader of every program (LD_PRELOAD, LD_LIBRARY_PATH, LD_AUDIT…,
# GLIBC_TUNABLES, GCONV_PATH) and the shell that starts the command (BASH_ENV and ENV
# name a file it sources; SHELLOPTS/BASHOPTS, IFS, PS4, PROMPT_COMMAND and CDPATH
# change how it parses or what it runs). The command may still export them itself;
# as variables they would act on the sandbox's own wrappers (the nested sandbox's
# shell and bwrap) too, and a bad one would break every command with no clue why.
STARTUP_NAMES = frozenset(
    {
        "BASH_ENV",
        "ENV",
        "SHELLOPTS",
        "BASHOPTS",
        "IFS",
        "PS4",
        "PROMPT_COMMAND",
        "CDPATH",
        "GLIBC_TUNABLES",
        "GCONV_PATH",
    }
)
STARTUP_PREFIXES = ("LD_",)

NAME_REQUIRED = "Give the variable's name."
NAME_INVALID = (
    "A variable's name is letters, digits and underscores, not starting with a digit (e.g. API_TOKEN), "
    f"at most {MAX_NAME_LENGTH} characters."
)
NAME_SANDBOX_OWNED = "{name} is set by the sandbox itself; a project cannot change it."
NAME_STARTUP = (
    "{name} changes how the shell or the program loader starts, before the test command runs; set it in the "
    "test command itself if it needs it."
)
VALUE_TOO_LONG = f"A value may be at most {MAX_VALUE_LENGTH:,} characters."
VALUE_NUL = "A value cannot hold a NUL character."
SECRET_TOO_SHORT = (
    f"A secret must be at least {MIN_SECRET_LENGTH} characters: a shorter value cannot be masked in the tests' "
    "output. Save it as a plain variable if it is not secret."
)
TOO_MANY = f"A project may have at most {MAX_VARIABLES_PER_PROJECT} variables."
VARIABLE_NOT_FOUND = "This project has no variable of that name."


@dataclass(frozen=True)
class VariableListing:
    """A variable as its owner may see it: ``value`` is None for a secret (it is saved,
    never shown) and for a value no longer readable (SECRET_KEY changed: set it again)."""

    name: str
    secret: bool
    value: str | None
    readable: bool
    updated_at: datetime


def project_variable_set(*, project: Project, name: str, value: str, secret: bool) -> ProjectVariable:
    """Create or replace the project's variable ``name``. Raises ValidationError (field
    errors under ``name`` and ``value``) and writes nothing when either is refused."""
    name = name.strip()
    errors: dict[str, list[str]] = {}
    name_error = _name_problem(name)
    if name_error:
        errors["name"] = [name_error]
    value_error = _value_problem(value, secret=secret)
    if value_error:
        errors["value"] = [value_error]
    if errors:
        raise ValidationError(errors)
    with transaction.atomic():
        variables = ProjectVariable.objects.select_for_update().filter(project=project)
        existing = variables.filter(name=name).first()
        if existing is None and variables.count() >= MAX_VARIABLES_PER_PROJECT:
            raise ValidationError({"name": [TOO_MANY]})
        variable = existing or ProjectVariable(project=project, name=name)
        variable.value_encrypted = encrypt_secret(value)
        variable.secret = secret
        variable.save()
    return variable


def project_variable_delete(*, project: Project, name: str) -> None:
    """Remove the project's variable ``name``; NotFound when it has none of that name.
    A name no variable can have (a NUL, which PostgreSQL refuses outright) is not
    looked up at all."""
    if len(name) > MAX_NAME_LENGTH or not _NAME.fullmatch(name):
        raise NotFound(VARIABLE_NOT_FOUND)
    deleted, _ = ProjectVariable.objects.filter(project=project, name=name).delete()
    if not deleted:
        raise NotFound(VARIABLE_NOT_FOUND)


def project_variables_list(*, project: Project) -> list[VariableListing]:
    """The project's variables by name, secret values left out."""
    listings = []
    for variable in ProjectVariable.objects.filter(project=project).order_by("name"):
        value = _decrypted(variable)
        listings.append(
            VariableListing(
                name=variable.name,
                secret=variable.secret,
                value=None if variable.secret or value is None else value,
                readable=value is not None,
                updated_at=variable.updated_at,
            )
        )
    return listings


def project_sandbox_variables(project: Project) -> tuple[tuple[str, str], ...]:
    """The project's variables decrypted, for ``ProjectSandbox(variables=…)``: the
    environment of its test command only. A value no longer readable is left out (the
    command sees the variable unset rather than empty)."""
    pairs = []
    for variable in ProjectVariable.objects.filter(project=project).order_by("name"):
        value = _decrypted(variable)
        if value is not None:
            pairs.append((variable.name, value))
    return tuple(pairs)


def secret_masker(project: Project) -> OutputMasker:
    """A masker of the project's secret values, for the output of every command that
    got them (``run_test_command(masker=…)``, the Claude CLI's stream)."""
    values = (_decrypted(variable) for variable in ProjectVariable.objects.filter(project=project, secret=True))
    return OutputMasker(value for value in values if value)


def _decrypted(variable: ProjectVariable) -> str | None:
    """The value, or None where a stored ciphertext no longer decrypts."""
    if not variable.value_encrypted:
        return ""
    value = decrypt_secret(variable.value_encrypted)
    return value if value else None


def _name_problem(name: str) -> str:
    if not name:
        return NAME_REQUIRED
    if len(name) > MAX_NAME_LENGTH or not _NAME.fullmatch(name):
        return NAME_INVALID
    if name in SANDBOX_OWNED_NAMES:
        return NAME_SANDBOX_OWNED.format(name=name)
    if name in STARTUP_NAMES or name.startswith(STARTUP_PREFIXES):
        return NAME_STARTUP.format(name=name)
    return ""


def _value_problem(value: str, *, secret: bool) -> str:
    if len(value) > MAX_VALUE_LENGTH:
        return VALUE_TOO_LONG
    if "\x00" in value:
        return VALUE_NUL
    if secret and len(value) < MIN_SECRET_LENGTH:
        return SECRET_TOO_SHORT
    return ""
