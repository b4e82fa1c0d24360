"""What an http probe may reach: loopback, plus what ``[http] allow`` lists.

Theory
------
A probe fetches what a config or an agent names, from the coordinator's host: left
open, that is a way to make the coordinator fetch anything its network can see.  So a
URL is reachable only when it is

* on the host ``localhost``, ``127.0.0.1`` or ``[::1]`` (any scheme, any port): the
  implicit set.  No other name or address is implicit, not even the rest of
  ``127.0.0.0/8`` nor ``*.localhost``: a second loopback address such as
  ``127.0.0.2`` stands for "another machine" and needs listing like one, which is
  also how the tests reach a "remote" server without root; or
* under an entry of ``[http] allow``: ``scheme://host[:port][/path]``.  The scheme
  must be the same (``https://x`` does not allow ``http://x``), the host the same
  name or address, the port the same (an entry without a port means the scheme's
  default: 443 for https, 80 for http), and the URL's path must be the entry's path
  or below it, by whole segments (``/api`` covers ``/api`` and ``/api/v1``, not
  ``/apix``).

How names compare: scheme and host case-insensitively, one trailing dot of a host
ignored (``app.example.com.`` is ``app.example.com``), IP literals by value
(``[0:0::1]`` is ``[::1]``); paths case-sensitively.  Refused outright, whatever the
list says: credentials in the URL (``https://app.example.com@evil.com`` is a URL for
``evil.com`` with the user ``app.example.com``: refused as a URL with userinfo, never
matched as the listed host), whitespace, control characters and backslashes (parsers
disagree about them), non-ASCII hosts (write the punycode), and, when the matching
entry has a path, dot segments (``/api/../admin``, also percent-encoded) that a server
would resolve outside it.

Redirects are judged by the same rule, hop by hop (``probes.kinds.http``).

Pure: no I/O, no DNS (a name is matched as written; what it resolves to is the
operator's business when they list it).  Imports only the standard library, for the
client's one-shot verbs (and msgspec, for ``Reach``).
"""

from __future__ import annotations

import ipaddress
import re
import urllib.parse
from typing import NamedTuple, Sequence

import msgspec

IMPLICIT_HOSTS: tuple[str, ...] = ("localhost", "127.0.0.1", "::1")
DEFAULT_PORTS = {"http": 80, "https": 443}
_UNSAFE = re.compile(r"[\s\\\x00-\x1f\x7f]")


class Origin(NamedTuple):
    """One ``[http] allow`` entry, normalised: what a URL must match."""

    scheme: str
    host: str
    port: int
    path: str  # "" for every path, else "/a/b" (no trailing slash)


def _shown(value: str, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _host(hostname: str) -> str:
    """The comparable form of a host: lower case, no trailing dot, IPs by value.
    Raises ValueError for an empty label or a non-ASCII name."""
    host = hostname.lower()
    try:
        return ipaddress.ip_address(host).compressed
    except ValueError:
        pass
    if not host.isascii():
        raise ValueError("a host must be ASCII (write an international name in its xn-- form)")
    host = host[:-1] if host.endswith(".") else host
    if not host or "" in host.split("."):
        raise ValueError("the host has an empty label")
    return host


def _split(url: str) -> tuple[urllib.parse.SplitResult, str, int]:
    """``(parts, host, port)`` of an http(s) URL; ValueError saying what is wrong."""
    if _UNSAFE.search(url):
        raise ValueError("it contains whitespace, a control character or a backslash")
    parts = urllib.parse.urlsplit(url)
    port = parts.port  # raises ValueError on a malformed port
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS or not parts.hostname:
        raise ValueError("it is not an http:// or https:// URL with a host")
    if "@" in parts.netloc:
        raise ValueError("it carries credentials (user@host); they are never sent, so such a URL is refused")
    return parts, _host(parts.hostname), port if port is not None else DEFAULT_PORTS[scheme]


def url_problem(url: str) -> str | None:
    """Why ``url`` is not an http(s) URL a probe could fetch at all, or None."""
    try:
        _split(url)
    except ValueError as exc:
        return f"{_shown(url)} is not a valid URL to probe: {exc}"
    return None


def parse_origin(entry: str) -> Origin:
    """An ``[http] allow`` entry; ValueError (one sentence) when it is not one."""
    try:
        parts, host, port = _split(entry)
    except ValueError as exc:
        raise ValueError(f"{_shown(entry)} is not an allow entry: {exc}") from None
    if parts.query or parts.fragment or entry.endswith(("?", "#")):
        raise ValueError(f"{_shown(entry)} is not an allow entry: write scheme://host[:port][/path], without ? or #")
    path = parts.path.rstrip("/")
    if _dot_segments(path):
        raise ValueError(f"{_shown(entry)} is not an allow entry: its path has '.' or '..' segments")
    return Origin(parts.scheme.lower(), host, port, path)


def origin_problem(entry: str) -> str | None:
    try:
        parse_origin(entry)
    except ValueError as exc:
        return str(exc)
    return None


def _dot_segments(path: str) -> bool:
    return any(seg in (".", "..") for seg in urllib.parse.unquote(path).split("/"))


def _under(path: str, prefix: str) -> bool:
    return not prefix or path == prefix or path.startswith(prefix + "/")


def refusal(url: str, allow: Sequence[str]) -> str | None:
    """Why a probe may not fetch ``url`` given the ``allow`` entries, or None if it may.

    The one sentence names the URL and what would allow it.  Entries are assumed
    checked (``parse_origin``) when the config was loaded; a bad one matches nothing.
    """
    try:
        parts, host, port = _split(url)
    except ValueError as exc:
        return f"{_shown(url)} is not a valid URL to probe: {exc}"
    if host in IMPLICIT_HOSTS:
        return None
    scheme = parts.scheme.lower()
    for entry in allow:
        try:
            origin = parse_origin(entry)
        except ValueError:
            continue
        if (origin.scheme, origin.host, origin.port) != (scheme, host, port):
            continue
        if not _under(parts.path or "/", origin.path):
            continue
        if origin.path and _dot_segments(parts.path):
            return f"{_shown(url)} has '.' or '..' segments, which could leave {entry}'s path: refused"
        return None
    netloc = f"[{host}]" if ":" in host else host
    if port != DEFAULT_PORTS[scheme]:
        netloc += f":{port}"
    return (
        f"{_shown(url)} is neither loopback (localhost, 127.0.0.1, [::1]) nor under an entry of "
        f"[http] allow in lockstep.toml: to probe it, add allow = [\"{scheme}://{netloc}\"]"
    )


# --------------------------------------------------------------------------- the runtime form

DEFAULT_MAX_BODY = 16 * 2**20  # bytes of a response body read; more is "too large"
DEFAULT_CONNECT_TIMEOUT = 10.0  # seconds to connect (and shake hands, for https)


class Reach(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """``[http]`` as a probe receives it: filled in by the coordinator from its own
    ``lockstep.toml`` whatever a request says, so an agent cannot widen it."""

    allow: list[str] = []
    ca: str | None = None  # absolute path of a PEM file of CAs trusted besides the system's
    max_body: int = DEFAULT_MAX_BODY
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
