"""Bounds on what users are told: quoted values and whole messages (ai_scheduler.messages)."""

from __future__ import annotations

from ai_scheduler.messages import ELLIPSIS, MAX_ECHO, MAX_MESSAGE, echo, truncate


def test_echo_quotes_short_values_as_repr_does() -> None:
    for value in ("90m", "", "it's", 12345678901234567890, None, 1.5, ["a"]):
        assert echo(value) == repr(value)


def test_echo_cuts_long_values_in_the_middle() -> None:
    quoted = echo("a" * 2000 + "z" * 3000)
    assert len(quoted) == MAX_ECHO
    assert quoted.startswith("'aaa") and quoted.endswith("zzz'") and "..." in quoted


def test_echo_of_an_integer_too_long_to_print() -> None:
    assert echo(10**5000) == "<int too large to print>"


def test_truncate_caps_a_message_as_kube_scheduler_does() -> None:
    assert truncate("short") == "short"
    assert truncate("x" * MAX_MESSAGE) == "x" * MAX_MESSAGE
    cut = truncate("x" * (MAX_MESSAGE + 1))
    assert len(cut) == MAX_MESSAGE and cut.endswith(ELLIPSIS)
    assert truncate("y" * 50, 10) == "yyyyyy ..."
