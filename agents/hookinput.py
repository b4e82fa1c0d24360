"""A hook's input before it is an event: stdin read within a bound, and the checks every
client's hook makes of an event's common fields (agents/hooks.py is Claude Code's
reading, agents/toolwrites.py every client's).  Imports nothing of either, so both use
it without an import cycle."""

from __future__ import annotations

import sys
from typing import BinaryIO

from protocol.errors import LockstepError


class HookInputError(LockstepError):
    """The hook's stdin is not an event it can read (any client's hook: too large, not
    UTF-8; Claude Code's: not JSON, no event name, a field of the wrong type)."""


# The most of stdin a hook reads: an event carries a Write's whole content, and reading
# without a bound let a 256 MiB payload take 530 MiB at its peak (now: 50 MiB).
MAX_INPUT_BYTES = 32 * 1024 * 1024


def read_input(stream: BinaryIO | None = None) -> str:
    """The event text on stdin (``stream``), reading at most ``MAX_INPUT_BYTES`` and one
    byte more: a longer input is refused unread, as is one that is not UTF-8
    (``HookInputError``, answered as every failure is)."""
    data = (stream if stream is not None else sys.stdin.buffer).read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise HookInputError(f"hook input is larger than {MAX_INPUT_BYTES // (1024 * 1024)} MiB: not read")
    try:
        return data.decode()
    except UnicodeDecodeError as exc:
        raise HookInputError(f"hook input is not UTF-8 ({exc.reason} at byte {exc.start})") from None


def json_kind(value: object) -> str:
    """The JSON name of a decoded value's type, for messages about input."""
    kinds = {bool: "a boolean", int: "a number", float: "a number", str: "a string", list: "an array", dict: "an object"}
    return "null" if value is None else kinds.get(type(value), type(value).__name__)


def cwd_problem(event: dict) -> str | None:
    """What is wrong with the event's ``cwd`` (a folder name, or absent), or None."""
    cwd = event.get("cwd")
    if cwd is None or isinstance(cwd, str) and "\0" not in cwd:
        return None
    if isinstance(cwd, str):
        return "hook input: cwd contains a NUL byte, which no folder name has"
    return f"hook input: cwd is {json_kind(cwd)}, not a folder"
