"""The sign-in throttle and the client address, below the views."""

from __future__ import annotations

import pytest
from django.test import RequestFactory

from accounts.password_validation import MinimumNonSpaceLengthValidator
from accounts.services import (
    BACKING_OFF,
    RATE_LIMITED,
    auth_failure_record,
    auth_rate_limit_hit,
    client_address,
)
from core.exceptions import RateLimited

EMAIL = "target@example.com"


def address_of(remote_addr: str | None, forwarded: str | None = None) -> str:
    meta = {"REMOTE_ADDR": remote_addr} if remote_addr is not None else {}
    if forwarded is not None:
        meta["HTTP_X_FORWARDED_FOR"] = forwarded
    request = RequestFactory().get("/")
    if remote_addr is None:
        del request.META["REMOTE_ADDR"]
    request.META.update(meta)
    return client_address(request)


# --- client_address ------------------------------------------------------------------------


def test_without_trusted_proxies_the_header_is_never_read(settings) -> None:
    settings.TRUSTED_PROXIES = []
    assert address_of("198.51.100.7", "203.0.113.1") == "198.51.100.7"
    assert address_of("127.0.0.1", "203.0.113.1") == "127.0.0.1"


def test_an_untrusted_peer_is_the_client_whatever_it_forwards(settings) -> None:
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert address_of("198.51.100.7", "10.0.0.5, 203.0.113.1") == "198.51.100.7"


@pytest.mark.parametrize(
    ("forwarded", "expected"),
    [
        ("203.0.113.1", "203.0.113.1"),
        # The client wrote the left-most entries; the last proxy appended the real one.
        ("1.2.3.4, 5.6.7.8, 203.0.113.1", "203.0.113.1"),
        # Two proxies of ours: the right-most address that is not one of them.
        ("1.2.3.4, 203.0.113.1, 10.0.0.9", "203.0.113.1"),
        ("203.0.113.1:51234", "203.0.113.1"),
        ("[2001:db8::1]:443", "2001:db8::1"),
        ("::ffff:203.0.113.1", "203.0.113.1"),
        # Nothing but proxies, no header, or garbage where the client should be: the peer.
        ("10.0.0.9", "10.1.1.1"),
        ("", "10.1.1.1"),
        ("1.2.3.4, not-an-address", "10.1.1.1"),
    ],
)
def test_a_trusted_proxy_forwards_the_right_most_untrusted_address(settings, forwarded: str, expected: str) -> None:
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert address_of("10.1.1.1", forwarded) == expected


def test_a_peer_without_an_address_is_unknown(settings) -> None:
    settings.TRUSTED_PROXIES = ["10.0.0.0/8"]
    assert address_of(None, "203.0.113.1") == "unknown"
    assert address_of("", "203.0.113.1") == "unknown"


# --- the throttle ----------------------------------------------------------------------------


def hit(address: str, now: float, email: str = EMAIL) -> None:
    auth_rate_limit_hit(action="login", client_address=address, email=email, now=now)


def fail(address: str, now: float, email: str = EMAIL) -> None:
    hit(address, now, email)
    auth_failure_record(client_address=address, email=email, now=now)


def refused_for(address: str, now: float, email: str = EMAIL) -> int:
    with pytest.raises(RateLimited) as excinfo:
        hit(address, now, email)
    assert excinfo.value.message == BACKING_OFF
    return excinfo.value.retry_after


def test_failures_for_an_email_back_off_exponentially_up_to_the_cap(settings) -> None:
    settings.AUTH_BACKOFF_AFTER_FAILURES = 3
    settings.AUTH_BACKOFF_MAX_SECONDS = 8
    settings.AUTH_RATE_LIMIT_ATTEMPTS = settings.AUTH_RATE_LIMIT_ADDRESS_ATTEMPTS = 1000
    t = 1_000_000.0
    for _ in range(3):
        fail("198.51.100.1", t)
    # 3 failures: one attempt a second; then 2, 4, 8, 8 seconds after each new failure.
    for delay in (1, 2, 4, 8, 8):
        assert refused_for("198.51.100.1", t + 0.2) == delay
        assert refused_for("198.51.100.1", t + delay - 0.5) == 1
        t += delay
        fail("198.51.100.1", t)
    # Other addresses that have failed (for any email) are held back as well ...
    fail("198.51.100.2", t, email="someone.else@example.com")
    assert refused_for("198.51.100.2", t + 1) == 7
    # ... but not one that has not failed.
    hit("192.0.2.1", t + 1)


def test_only_one_attempt_goes_through_when_the_gate_opens(settings) -> None:
    settings.AUTH_BACKOFF_AFTER_FAILURES = 1
    fail("198.51.100.1", 100.0)
    hit("198.51.100.1", 101.0)  # let through: the credential check is under way
    assert refused_for("198.51.100.1", 101.0) == 1  # a concurrent one waits


def test_failures_below_the_threshold_do_not_slow_anyone(settings) -> None:
    for _ in range(settings.AUTH_BACKOFF_AFTER_FAILURES - 1):
        fail("198.51.100.1", 50.0)
    hit("198.51.100.1", 50.0)


def test_ipv6_clients_are_counted_per_64(settings) -> None:
    settings.AUTH_RATE_LIMIT_ADDRESS_ATTEMPTS = 3
    for n in range(3):
        hit(f"2001:db8:1:2::{n + 1}", 10.0, email=f"user{n}@example.com")
    with pytest.raises(RateLimited) as excinfo:
        hit("2001:db8:1:2:ffff::1", 10.0, email="fresh@example.com")
    assert excinfo.value.message == RATE_LIMITED
    hit("2001:db8:1:3::1", 10.0, email="fresh@example.com")  # another /64


def test_registrations_count_per_address_only(settings) -> None:
    for _ in range(settings.AUTH_RATE_LIMIT_ATTEMPTS):
        auth_rate_limit_hit(action="register", client_address="198.51.100.1", now=5.0)
    with pytest.raises(RateLimited):
        auth_rate_limit_hit(action="register", client_address="198.51.100.1", now=5.0)
    auth_rate_limit_hit(action="register", client_address="198.51.100.2", now=5.0)
    # Logins have counts of their own.
    hit("198.51.100.1", 5.0)


# --- password rules -----------------------------------------------------------------------------


@pytest.mark.parametrize("password", [" " * 8, "\t\n" * 6, "a b c d e f g", "       x"])
def test_spaces_do_not_count_towards_the_length(password: str) -> None:
    from django.core.exceptions import ValidationError

    with pytest.raises(ValidationError):
        MinimumNonSpaceLengthValidator(8).validate(password)


def test_a_passphrase_with_spaces_is_fine() -> None:
    MinimumNonSpaceLengthValidator(8).validate("correct horse battery")
