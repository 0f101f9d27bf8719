"""The masker of secret values in command output (core/masking.py): whole texts and
streams whose chunks split a secret anywhere."""

from __future__ import annotations

import pytest

from core.masking import MASK, MAX_HELD_CHARS, OutputMasker

SECRET = "tok-3f9a1c7e"


def streamed(masker: OutputMasker, chunks: list[str]) -> tuple[list[str], str]:
    """What a stream hands out for each chunk, and all of it joined (with the end)."""
    stream = masker.stream()
    pieces = [stream.write(chunk) for chunk in chunks]
    return pieces, "".join(pieces) + stream.finish()


def test_every_occurrence_is_masked_and_the_rest_kept() -> None:
    masker = OutputMasker([SECRET])

    assert masker.mask(f"a={SECRET} b={SECRET}\n") == f"a={MASK} b={MASK}\n"
    assert masker.mask("nothing secret here") == "nothing secret here"


def test_values_too_short_to_mask_are_left_out() -> None:
    masker = OutputMasker(["abc", ""])

    assert not masker
    assert masker.mask("abc abc") == "abc abc"


def test_several_secrets_and_one_inside_another() -> None:
    masker = OutputMasker(["alpha-key", "beta-key", "key-"])

    assert masker.mask("alpha-key beta-key key-1") == f"{MASK} {MASK} {MASK}1"


def test_overlapping_occurrences_are_masked_as_their_union() -> None:
    masker = OutputMasker(["abcd", "cdef"])

    assert masker.mask("xxabcdefyy") == f"xx{MASK}yy"
    assert "ef" not in masker.mask("abcdef") and "ab" not in masker.mask("abcdef")


@pytest.mark.parametrize("cut", range(1, len(SECRET)))
def test_a_secret_split_between_two_chunks_is_masked(cut: int) -> None:
    masker = OutputMasker([SECRET])
    text = f"token: {SECRET} done\n"
    split = text.index(SECRET) + cut

    pieces, whole = streamed(masker, [text[:split], text[split:]])

    assert whole == f"token: {MASK} done\n"
    assert not any(SECRET[:cut] in piece and SECRET[cut:] in piece for piece in pieces)
    assert all(SECRET not in piece for piece in pieces)


def test_a_secret_one_character_per_chunk() -> None:
    masker = OutputMasker([SECRET, "other-secret"])
    text = f"{SECRET}|other-secret|{SECRET}"

    pieces, whole = streamed(masker, list(text))

    assert whole == f"{MASK}|{MASK}|{MASK}"
    assert SECRET[:4] not in "".join(pieces)  # no fragment went out before it could be masked


def test_overlapping_secrets_across_chunks_leave_no_fragment() -> None:
    masker = OutputMasker(["abcd", "cdef"])

    pieces, whole = streamed(masker, ["xxabcd", "efyy"])

    assert whole == f"xx{MASK}yy"
    assert "ef" not in "".join(pieces)


def test_a_secret_at_the_very_end_comes_out_masked_at_finish() -> None:
    masker = OutputMasker([SECRET])
    stream = masker.stream()

    first = stream.write(f"last line {SECRET}")

    assert SECRET not in first
    assert first + stream.finish() == f"last line {MASK}"


def test_text_without_secrets_is_held_back_only_by_the_longest_secret() -> None:
    masker = OutputMasker([SECRET])
    stream = masker.stream()

    assert stream.write("0123456789" * 3) == ("0123456789" * 3)[: 30 - (len(SECRET) - 1)]


def test_a_masker_without_secrets_passes_chunks_through() -> None:
    stream = OutputMasker().stream()

    assert stream.write("abc") == "abc"
    assert stream.finish() == ""


def test_a_run_of_overlapping_occurrences_is_not_held_back_forever() -> None:
    masker = OutputMasker(["aaaa"])
    stream = masker.stream()

    out = "".join(stream.write("a" * 10_000) for _ in range(MAX_HELD_CHARS // 10_000 + 2))

    assert out and set(out) <= set(MASK)
    assert "aaaa" not in out + stream.finish()
