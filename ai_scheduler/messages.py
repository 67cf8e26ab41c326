"""Bounds on what the scheduler tells users: values it echoes back, and whole messages.

Reasons quote what the user wrote ("... must be a positive integer, got 'x'"),
and users write anything: a label or annotation value can be thousands of
characters long. A reason must stay readable and fit where it goes, so:

- `echo` quotes a user-supplied value as `repr` does, cut in the middle with
  an ellipsis past `MAX_ECHO` characters (the standard library's reprlib);
- `truncate` caps a whole message at `MAX_MESSAGE` characters as
  kube-scheduler caps its event messages (truncateMessage in
  pkg/scheduler/schedule_one.go: the first 1,024 bytes' worth, ending in
  " ..."), for what still grows long: many reasons, long object names.
"""

from __future__ import annotations

import reprlib

MAX_ECHO = 200  # characters of a user's value quoted in a message
MAX_MESSAGE = 1024  # kube-scheduler's maxMessageLength for events; conditions are held to it too
ELLIPSIS = " ..."

_ECHO = reprlib.Repr()
_ECHO.maxstring = MAX_ECHO
_ECHO.maxother = MAX_ECHO
_ECHO.maxlevel = 3


def echo(value: object) -> str:
    """`repr(value)`, cut to about MAX_ECHO characters (`'aaaa...aaaa'`) when longer."""
    try:
        return _ECHO.repr(value)
    except ValueError:  # an int with more digits than Python will print
        return f"<{type(value).__name__} too large to print>"


def truncate(message: str, limit: int = MAX_MESSAGE) -> str:
    """The message, or its first `limit` characters ending in " ..." when it is longer."""
    if len(message) <= limit:
        return message
    return message[: limit - len(ELLIPSIS)] + ELLIPSIS
