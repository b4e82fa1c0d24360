"""The value types of ``lockstep.toml`` and ``PLAN.toml``, and the one hook that decodes them.

Theory
------
A file is decoded by ``msgspec`` straight into frozen Structs (``Table`` subclasses, with
unknown fields forbidden), so the Struct *is* the schema: field names are the keys,
annotations are the types, defaults are the defaults.  What msgspec cannot say on its
own (a duration, a repo-relative path, a regular expression that compiles, an http
URL) is a small custom type here, checked by ``dec_hook`` when the file is decoded; the
hook's ``ValueError`` becomes msgspec's ``ValidationError`` with the key's path, which
``probes.config`` turns into a message naming the file, the table and the key.

The custom types exist only while decoding: ``Table.__post_init__`` stores every such
value as its plain builtin (``Seconds`` -> ``float``, ``RelPath`` -> ``str``), so a
decoded Struct holds the same plain values a hand-built one does, and encodes,
compares and converts like one.

This module imports only msgspec and ``re``: the client's one-shot verbs import it (the
``serve`` flags are generated from the settings schema) and must stay fast.
"""

from __future__ import annotations

import math
import re
from typing import Any

import msgspec

# --------------------------------------------------------------------------- durations

# One component is a number and a unit; components appear largest unit first, at most
# once each ("1h30m", not "30m1h" or "1m1m"), so every accepted string reads one way.
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_DURATION_ORDER = ("h", "m", "s", "ms")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_DURATION_SHAPE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|h|m|s))+")
_DURATION_EXPECTED = "expected a number of seconds or a string like '30s', '5m', '1h30m', '250ms'"


def duration_problem(value: object) -> tuple[float | None, str]:
    """``(seconds, "")`` for a valid duration, else ``(None, why it is not one)``.

    A duration is a number of seconds, or "30s", "5m", "1h", "1h30m", "250ms".
    Negative, NaN and infinite values are refused, as are unitless strings ("30" is
    ambiguous next to "30ms").
    """
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None, f"{shown(value)} is not a duration: {_DURATION_EXPECTED}"
    if isinstance(value, (int, float)):
        seconds = float(value)
        if not math.isfinite(seconds) or seconds < 0:
            return None, f"{shown(value)} is not a duration: it must be finite and >= 0"
        return seconds, ""
    text = value.strip()
    if not _DURATION_SHAPE.fullmatch(text):
        return None, f"{shown(value)} is not a duration: {_DURATION_EXPECTED}"
    seconds = 0.0
    last_rank = -1
    for number, unit in _DURATION_PART.findall(text):
        rank = _DURATION_ORDER.index(unit)
        if rank <= last_rank:
            return None, (
                f"{shown(value)} is not a duration: units must appear largest first, "
                "each at most once (like '1h30m')"
            )
        last_rank = rank
        seconds += float(number) * _DURATION_UNITS[unit]
    if not math.isfinite(seconds):  # digits past float's range ("1000...0s") read as infinity
        return None, f"{shown(value)} is not a duration: it must be finite"
    return seconds, ""


def format_duration(seconds: float) -> str:
    """The shortest way the docs write ``seconds``: 900 -> "15m", 1.5 -> "1.5s"."""
    for unit in ("h", "m", "s"):
        size = _DURATION_UNITS[unit]
        if seconds >= size and seconds % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s" if seconds >= 1 or seconds == 0 else f"{seconds * 1000:g}ms"


# --------------------------------------------------------------------------- value types


class Seconds(float):
    """A duration >= 0 (``lock_delay``): a number of seconds or "250ms", "30s", "5m"."""


class PositiveSeconds(Seconds):
    """A duration longer than zero (timeouts, ``heartbeat``, ``every``)."""


class Timeout(PositiveSeconds):
    """How long a probe or check may run: from 10ms to 24h (``probes.model``'s bounds,
    which every spec is held to when it runs: said here when the file is read)."""


class Age(Seconds):
    """How long something is kept: a duration, or a number of days ("30d", "1.5d")."""


class Size(int):
    """A number of bytes: an integer, or "500MB", "1GB", "64MiB" (KB/MB/GB/TB are powers
    of 1000, KiB/MiB/GiB/TiB of 1024); at least 1MB."""


class Bytes(int):
    """A number of bytes with no lower bound: an integer, or "250KB", "1.5MB", "64KiB"
    (a bundle's size budget)."""


class Text(str):
    """A string that is not blank."""


class Name(Text):
    """The name of a check, probe or step: one shell-safe word, since it appears in
    ledger rows, CLI output and rule filters."""


class RelPath(Text):
    """A '/'-separated path relative to the repository root that stays inside it."""


class Glob(Text):
    """A relative glob such as ``*.whl``."""


class Regex(Text):
    """A Python regular expression that compiles."""


class HexDigest(Text):
    """A sha256 digest: 64 hex digits."""


class HttpUrl(Text):
    """An http(s) URL with a host and no credentials.  Whether a probe may fetch it
    (loopback, or listed in ``[http] allow``) is checked once the whole file is read."""


class AllowedOrigin(Text):
    """An ``[http] allow`` entry: ``scheme://host[:port][/path]`` (``probes.reach``)."""


class Argv(list):
    """A non-empty array of non-empty strings: a command without a shell."""


class RegexList(Argv):
    """A non-empty array of regular expressions that compile."""


_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
_HEX_DIGEST = re.compile(r"[0-9a-fA-F]{64}")

_KIND_NAMES = {dict: "a table", list: "an array", str: "a string", bool: "a boolean",
               int: "an integer", float: "a float"}


def shown(value: object, limit: int = 80) -> str:
    """``repr(value)``, cut to ``limit`` characters: a message stays one short line
    whatever the file holds."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def describe(value: object) -> str:
    """How a message names a TOML value: ``an integer (3)``."""
    return f"{_KIND_NAMES.get(type(value), type(value).__name__)} ({shown(value)})"


def name_problem(value: str) -> str | None:
    if _NAME_RE.fullmatch(value):
        return None
    return (
        f"{shown(value)} is not a valid name: use letters, digits, '_', '.', '-' "
        "(at most 64 characters, starting with a letter or digit)"
    )


def relpath_problem(value: str) -> str | None:
    """Why ``value`` is not a repo-relative path, or None when it is one."""
    if "\\" in value or "\x00" in value:
        return f"{shown(value)} must be a '/'-separated path"
    if value.startswith("/"):
        return f"{shown(value)} must be relative to the repository root, not absolute"
    if ".." in value.split("/"):
        return f"{shown(value)} must not contain '..' (it would leave the repository)"
    return None


def regex_problem(pattern: str) -> str | None:
    try:
        re.compile(pattern)
    except re.error as exc:
        return f"{shown(pattern)} is not a valid regular expression ({exc})"
    return None


def http_url_problem(url: str) -> str | None:
    """Why ``url`` is not an http(s) URL a probe could fetch, or None (``probes.reach``)."""
    from probes.reach import url_problem  # only when a config names a URL

    return url_problem(url)


def allowed_origin_problem(entry: str) -> str | None:
    from probes.reach import origin_problem

    return origin_problem(entry)


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"expected a string, got {describe(value)}")
    if not value.strip():
        raise ValueError("must not be empty")
    return value


def _checked(problem: Any) -> Any:
    def check(value: object) -> str:
        text = _text(value)
        why = problem(text)
        if why:
            raise ValueError(why)
        return text

    return check


def _seconds(value: object) -> float:
    seconds, why = duration_problem(value)
    if seconds is None:
        raise ValueError(why)
    return seconds


def _positive_seconds(value: object) -> float:
    seconds = _seconds(value)
    if seconds <= 0:
        raise ValueError(f"{shown(value)} must be longer than zero")
    return seconds


def _timeout(value: object) -> float:
    from probes.model import MAX_TIMEOUT, MIN_TIMEOUT

    seconds = _positive_seconds(value)
    if not MIN_TIMEOUT <= seconds <= MAX_TIMEOUT:
        raise ValueError(f"{shown(value)} is out of bounds: a timeout is from {format_duration(MIN_TIMEOUT)} to {format_duration(MAX_TIMEOUT)}")
    return seconds


_AGE_DAYS = re.compile(r"(\d+(?:\.\d+)?)d")


def _age(value: object) -> float:
    if isinstance(value, str) and (days := _AGE_DAYS.fullmatch(value.strip())):
        seconds = float(days.group(1)) * 86400.0
        if not math.isfinite(seconds):
            raise ValueError(f"{shown(value)} is not a duration: it must be finite")
        return seconds
    seconds, why = duration_problem(value)
    if seconds is None:
        raise ValueError(why.replace("'250ms'", "'250ms', '30d'"))
    return seconds


def format_age(seconds: float) -> str:
    """``format_duration``, in days when ``seconds`` is a whole number of them."""
    if seconds >= 86400 and seconds % 86400 == 0:
        return f"{seconds / 86400:g}d"
    return format_duration(seconds)


INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1  # what the wire and the ledger carry

_SIZE_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12,
               "KIB": 2**10, "MIB": 2**20, "GIB": 2**30, "TIB": 2**40}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([A-Za-z]*)")
SIZE_MIN = 10**6


def _size(value: object, minimum: int = SIZE_MIN) -> int:
    expected = "expected a number of bytes or a string like '500MB', '1GB', '64MiB'"
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise ValueError(f"{shown(value)} is not a size: {expected}")
    match = _SIZE.fullmatch(value.strip()) if isinstance(value, str) else None
    if isinstance(value, str) and (match is None or match.group(2).upper() not in _SIZE_UNITS):
        raise ValueError(f"{shown(value)} is not a size: {expected}")
    if isinstance(value, int):
        size = value
    else:
        amount = float(match.group(1)) * _SIZE_UNITS[match.group(2).upper()]
        if not math.isfinite(amount):  # digits past float's range read as infinity
            raise ValueError(f"{shown(value)} is not a size: it is too large")
        size = int(amount)
    if size < minimum:
        raise ValueError(f"{shown(value)} is too small: a size must be at least {format_size(minimum)}")
    if size > INT64_MAX:
        raise ValueError(f"{shown(value)} is too large: a size must fit in 64 bits")
    return size


def _bytes(value: object) -> int:
    return _size(value, minimum=1)


def format_size(size: int) -> str:
    """The shortest exact way to write ``size``: 10**9 -> "1GB", 2**26 -> "64MiB"."""
    for unit in ("TB", "GB", "MB", "KB", "TiB", "GiB", "MiB", "KiB"):
        factor = _SIZE_UNITS[unit.upper()]
        if size >= factor and size % factor == 0:
            return f"{size // factor}{unit}"
    return str(size)


def _hex_digest(value: object) -> str:
    if not isinstance(value, str) or not _HEX_DIGEST.fullmatch(value):
        raise ValueError(f"expected 64 hex digits, got {describe(value)}")
    return value


def _glob(value: object) -> str:
    text = _text(value)
    if text.startswith("/"):
        raise ValueError(f"{shown(text)} must be a relative glob such as '*.whl'")
    return text


def _argv(value: object) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"expected a non-empty array of strings, got {describe(value)}")
    return value


def _regex_list(value: object) -> list[str]:
    for pattern in _argv(value):
        why = regex_problem(pattern)
        if why:
            raise ValueError(why)
    return value  # type: ignore[return-value]


# custom type -> (check returning the plain value or raising ValueError, plain type)
_DECODERS: dict[type, Any] = {
    Seconds: _seconds,
    PositiveSeconds: _positive_seconds,
    Timeout: _timeout,
    Age: _age,
    Size: _size,
    Bytes: _bytes,
    Text: _text,
    Name: _checked(name_problem),
    RelPath: _checked(relpath_problem),
    Glob: _glob,
    Regex: _checked(regex_problem),
    HexDigest: _hex_digest,
    HttpUrl: _checked(http_url_problem),
    AllowedOrigin: _checked(allowed_origin_problem),
    Argv: _argv,
    RegexList: _regex_list,
}


def dec_hook(kind: type, value: Any) -> Any:
    """msgspec's hook for the custom types above: check ``value``, wrap it in ``kind``."""
    check = _DECODERS.get(kind)
    if check is None:
        raise NotImplementedError(kind)
    return kind(check(value))


def _plain(value: Any) -> Any:
    if isinstance(value, float) and type(value) is not float:
        return float(value)
    if isinstance(value, int) and type(value) not in (int, bool):
        return int(value)
    if isinstance(value, str) and type(value) is not str:
        return str(value)
    if isinstance(value, list):
        items = [_plain(v) for v in value]
        # a plain list of custom-typed items (``list[AllowedOrigin]``) gets plain items too
        return items if type(value) is not list or any(a is not b for a, b in zip(items, value)) else value
    return value


def _holds_nul(value: Any) -> bool:
    """Whether a string in ``value`` (or in its lists and tables) holds U+0000."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, (list, tuple)):
        return any(_holds_nul(v) for v in value)
    if isinstance(value, dict):
        return any(_holds_nul(k) or _holds_nul(v) for k, v in value.items())
    return False


class Table(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A table of a TOML file: unknown keys are refused; custom-typed values are stored
    as their plain builtins once decoded (see the module docstring)."""

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if isinstance(value, int) and not INT64_MIN <= value <= INT64_MAX:
                # TOML integers are 64-bit; Python's are not, and a larger one would be
                # accepted here only to crash the coordinator when it encodes a reply
                raise ValueError(f"key '{name}': {shown(value, 24)} is out of range: integers must fit in 64 bits")
            if _holds_nul(value):
                # no command, argument, variable or path can hold one: it failed at spawn,
                # an "internal error" of the job, counted as a failing verify round
                raise ValueError(f"key '{name}': {shown(value)} contains a NUL character (\\u0000)")
            plain = _plain(value)
            if plain is not value:
                msgspec.structs.force_setattr(self, name, plain)


# --------------------------------------------------------------------------- probe params in TOML


def in_toml(toml_type: Any = None, *, key: str | None = None, optional: bool = False) -> msgspec.Meta:
    """How a probe kind's parameter is written in a ``[[probe]]`` table.

    Annotate a params field with it (``path: Annotated[str, in_toml(RelPath)]``):
    ``toml_type`` is the stricter type the file is checked against (default: the
    field's own, without ``None``), ``key`` the file's spelling when it differs, and
    ``optional`` makes a field the probe needs at run time optional in the file (the
    caller supplies it: a write's ``sha256`` from the agent's claim).
    """
    return msgspec.Meta(extra={"toml": {"type": toml_type, "key": key, "optional": optional}})


# A params field the caller fills in at run time (from the ledger or the worktree):
# never written in a [[probe]] table.
RUNTIME_ONLY = msgspec.Meta(extra={"toml": None})
