"""What the apps above accounts hook into when a user comes into being, without accounts
importing them (projects gives every new user a default project: projects/apps.py)."""

from __future__ import annotations

from typing import TypeVar

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.dispatch import Signal

U = TypeVar("U", bound=AbstractBaseUser)

#: Sent once for every new user, inside the transaction that saves it, with ``user``.
#: A receiver that raises rolls the new user back with everything it wrote.
user_created = Signal()


def user_save_new(*, user: U, using: str | None = None) -> U:
    """Save a new user and send ``user_created``, in one transaction: the one way users
    are created (registration, the admin's "add user", ``createsuperuser`` and every
    other use of ``User.objects.create_user``/``create_superuser``).

    The caller has validated ``user`` and set its password."""
    with transaction.atomic(using=using):
        user.save(using=using)
        user_created.send(sender=type(user), user=user)
    return user
