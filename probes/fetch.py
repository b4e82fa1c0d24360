"""One bounded GET, as the ``http`` and ``consistency`` kinds make it.

Bounds: connecting (and the TLS handshake) within ``Reach.connect_timeout``, the whole
exchange within ``total`` seconds (each read waits at most what is left), and at most
``Reach.max_body`` bytes of body (one more is read to know there were more: the body
is then marked truncated).  No proxy, whatever the environment says.  https is
verified with the standard library's default context (the system's CAs, plus
``Reach.ca`` when set), so a self-signed or mismatched certificate is a failure to
reach, with the TLS reason.

Redirects: a 3xx with a Location is followed (at most ``MAX_REDIRECTS`` hops) only
when the target passes ``probes.reach.refusal`` like the first URL did; otherwise the
fetch stops there and says which target it refused.  ``follow=False`` returns the 3xx
itself (a probe that expects a redirect checks its status).
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
import urllib.parse

import msgspec

from probes.reach import Reach, refusal

MAX_REDIRECTS = 5
REDIRECTS = (301, 302, 303, 307, 308)
_CHUNK = 1 << 16


class Fetched(msgspec.Struct, kw_only=True):
    """What one fetch saw: the last answer, or why there is none."""

    url: str  # the URL of the last answer (after redirects)
    status: int | None = None  # None: no answer (see ``error``)
    headers: dict[str, str] = {}  # lower-cased names
    body: bytes = b""
    truncated: bool = False  # the body was longer than max_body; ``body`` is its start
    redirects: list[str] = []  # the URLs followed, in order
    error: str = ""  # could not reach, or a redirect refused (with ``refused``)
    refused: str = ""  # a redirect target off the allow list, not followed


class _Deadline(Exception):
    pass


def _context(reach: Reach) -> ssl.SSLContext:
    context = ssl.create_default_context()
    if reach.ca:
        context.load_verify_locations(cafile=reach.ca)
    return context


def _set_timeout(sock: socket.socket, seconds: float) -> None:
    """Each read waits at most what is left; once http.client has closed its side of a
    closing connection the response reads from its own file, already bounded by the
    timeout set before (so the total stays within twice ``total`` at worst)."""
    try:
        sock.settimeout(seconds)
    except OSError:
        pass


def _get(url: str, reach: Reach, deadline: float) -> tuple[int, dict[str, str], bytes, bool]:
    parts = urllib.parse.urlsplit(url)
    left = deadline - time.monotonic()
    if left <= 0:
        raise _Deadline()
    connect = min(reach.connect_timeout, left)
    host, port = parts.hostname, parts.port
    if parts.scheme.lower() == "https":
        conn: http.client.HTTPConnection = http.client.HTTPSConnection(host, port, timeout=connect, context=_context(reach))
    else:
        conn = http.client.HTTPConnection(host, port, timeout=connect)
    try:
        conn.connect()
        sock = conn.sock  # the response reads through it even once the connection lets go of it
        target = parts.path or "/"
        if parts.query:
            target += "?" + parts.query
        _set_timeout(sock, max(deadline - time.monotonic(), 0.001))
        conn.request("GET", target, headers={"User-Agent": "lockstep-probe", "Accept-Encoding": "identity"})
        response = conn.getresponse()
        headers = {name.lower(): value for name, value in response.getheaders()}
        chunks: list[bytes] = []
        size = 0
        while size <= reach.max_body:
            left = deadline - time.monotonic()
            if left <= 0:
                raise _Deadline()
            _set_timeout(sock, left)
            chunk = response.read(min(_CHUNK, reach.max_body + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        body = b"".join(chunks)
        truncated = len(body) > reach.max_body
        return response.status, headers, body[: reach.max_body], truncated
    finally:
        conn.close()


def fetch(url: str, reach: Reach, total: float, *, follow: bool = True) -> Fetched:
    """GET ``url`` within ``total`` seconds; never raises for the network's sake."""
    deadline = time.monotonic() + total
    followed: list[str] = []
    while True:
        try:
            status, headers, body, truncated = _get(url, reach, deadline)
        except _Deadline:
            return Fetched(url=url, redirects=followed, error=f"no complete answer within {total:g}s")
        except ssl.SSLCertVerificationError as exc:
            return Fetched(url=url, redirects=followed, error=f"TLS verification failed: {exc.verify_message or exc}")
        except (OSError, http.client.HTTPException) as exc:
            why = "timed out" if isinstance(exc, socket.timeout) else (str(exc) or type(exc).__name__)
            return Fetched(url=url, redirects=followed, error=why)
        answer = Fetched(url=url, status=status, headers=headers, body=body, truncated=truncated, redirects=followed)
        location = headers.get("location")
        if not follow or status not in REDIRECTS or not location:
            return answer
        target = urllib.parse.urljoin(url, location)
        why = refusal(target, reach.allow)
        if why is not None:
            answer.error = f"redirected to {target}, which is not followed: {why}"
            answer.refused = target
            return answer
        if len(followed) >= MAX_REDIRECTS:
            answer.error = f"more than {MAX_REDIRECTS} redirects (the last to {target})"
            return answer
        followed.append(target)
        url = target
