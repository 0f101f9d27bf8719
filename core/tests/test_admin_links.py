"""Links between admin pages lead to the object they name, whatever its key."""

from __future__ import annotations

import re

import pytest

from core.admin import admin_change_link
from memory.models import ContextItem
from memory.services.context import context_save

pytestmark = pytest.mark.django_db


def test_a_text_key_the_admin_would_read_as_an_escape_still_opens_its_object(owner, client) -> None:
    item, _ = context_save(owner=owner, type="plan", content={"steps": ["one"]})
    # The admin reads "_23" in a URL as "#": a key holding it must be quoted in the link.
    ContextItem.objects.filter(pk=item.pk).update(id="ctx_23ab")
    item = ContextItem.objects.get(pk="ctx_23ab")
    owner.is_staff = owner.is_superuser = True
    owner.save()
    client.force_login(owner)

    link = admin_change_link(item, "the plan")
    href = re.search(r'href="([^"]+)"', link)
    assert href is not None and "ctx_5F23ab" in href.group(1)
    page = client.get(href.group(1))
    assert page.status_code == 200
    assert "ctx_23ab" in page.content.decode()


def test_a_number_key_is_linked_as_it_is(owner) -> None:
    assert f'href="/admin/accounts/user/{owner.pk}/change/"' in admin_change_link(owner)
