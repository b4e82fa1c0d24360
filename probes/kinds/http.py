"""``http``: an endpoint answers as expected.

Params: ``url`` (http/https: loopback, or under an entry of ``[http] allow``; see
``probes.reach``), ``status`` (default 200; null: any status), ``contains`` (substring
of the body), ``json_path`` (``$.a.b[0].c``, ``['key']``, negative indexes), ``equals``
(the value there, or the whole JSON document when no json_path, must equal this; true
is not 1), ``at_least`` (that value must be a number >= this).  GET, no proxy, bounded
in time and size, TLS verified (``probes.kinds.fetch``); redirects are followed only to
URLs the allow list covers, and not at all when ``status`` expects a 3xx (then the 3xx
is what is checked).  Any miss -> ``endpoint failing``; a refused redirect names its
target.
``expect_hash_of`` (a local artifact, e.g. ``dist/app.js``): the value at ``json_path``
(a hex sha256 or a prefix of 7+ digits, ``sha256:`` allowed), or else the whole body,
must be that file's sha256; otherwise ``deploy hash mismatch`` (the deploy serves
another build than the one on disk).
``deploy`` (implied by ``expect_hash_of``): the answer is a deploy; its hash (the value
at ``json_path``, the artifact's full hash when that value is a prefix of it, else the
body's sha256) and size (the body's, or the matching artifact's) go in
``details["deploy"]``, which the coordinator records as ``deploy.seen`` when it changes.
``reach`` is the coordinator's ``[http]`` table, filled in at run time, never written.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Annotated, Any

import msgspec

from probes.fetch import fetch
from probes.kinds import Kind
from probes.kinds.common import Params, make_result, resolve, sha256_file
from probes.model import (
    DEPLOY_HASH_MISMATCH,
    ENDPOINT_FAILING,
    ProbeError,
    ProbeResult,
    ProbeSpec,
)
from probes.output import errors_first
from probes.reach import Reach, refusal
from probes.schema import RUNTIME_ONLY, HttpUrl, RelPath, Text, in_toml


class HttpParams(Params):
    url: Annotated[str, in_toml(HttpUrl)]
    status: Annotated[int | None, in_toml(Annotated[int, msgspec.Meta(ge=100, le=599)])] = 200
    contains: Annotated[str | None, in_toml(Text)] = None
    json_path: Annotated[str | None, in_toml(Text)] = None
    # UNSET (absent) differs from null: {"equals": null} checks the value is null.
    equals: Any | msgspec.UnsetType = msgspec.UNSET
    at_least: int | float | None = None
    # a local artifact (dist/app.js): the value at json_path (a hex sha256, or a prefix of
    # 7+ digits), or else the whole body, must be that file's sha256 -> "deploy hash mismatch"
    expect_hash_of: Annotated[str | None, in_toml(RelPath)] = None
    # what the URL serves is a deploy (implied by expect_hash_of): its hash - the value at
    # json_path, else the body's sha256 - goes in the result, and the coordinator records
    # each new one (deploy.seen) for the bundle probe
    deploy: bool = False
    # [http] of the coordinator's lockstep.toml: what may be fetched, and how
    reach: Annotated[Reach, RUNTIME_ONLY] = msgspec.field(default_factory=Reach)


def check(label: str, params: HttpParams) -> None:
    check_reachable(params.url, params.reach.allow)
    if params.json_path is not None:
        parse_json_path(params.json_path)
    if params.status is not None and not 100 <= params.status <= 599:
        raise ProbeError(f"{label}: status must be an HTTP status code, got {params.status}")
    if params.at_least is not None and not math.isfinite(params.at_least):  # nan and inf failed every value, -inf passed any
        raise ProbeError(f"{label}: at_least must be a finite number, got {params.at_least}")


def check_reachable(url: str, allow: list[str] | tuple[str, ...] = ()) -> None:
    """Refuse (ProbeError) a URL that is neither loopback nor under an ``allow`` entry."""
    problem = refusal(url, allow)
    if problem:
        raise ProbeError(problem)


def check_loopback_url(url: str) -> None:
    """Refuse (ProbeError) any URL that is not http(s) on localhost, 127.0.0.1 or ::1."""
    check_reachable(url, ())


def target(spec: ProbeSpec, params: HttpParams) -> str:
    return params.url


# The pool's timeout must win over the socket's, so a hang reads "timed out".
_SOCKET_TIMEOUT_SLACK = 5.0


_JSON_PATH_STEP = re.compile(
    r"""\.([A-Za-z_][A-Za-z0-9_\-]*)|\[(-?\d+)\]|\[(?:'([^']*)'|"([^"]*)")\]"""
)
_MISSING = object()


def parse_json_path(path: str) -> tuple[str | int, ...]:
    """``$.a.b[0].c`` -> ``("a", "b", 0, "c")``; ProbeError outside the subset."""
    if not path.startswith("$"):
        raise ProbeError(f"json_path {path!r} must start with '$'")
    steps: list[str | int] = []
    position = 1
    while position < len(path):
        match = _JSON_PATH_STEP.match(path, position)
        if match is None:
            raise ProbeError(
                f"json_path {path!r}: cannot parse {path[position:]!r}; supported steps are "
                ".name, [index] and ['key']"
            )
        name, index, single, double = match.groups()
        if index is not None:
            steps.append(int(index))
        else:
            steps.append(next(s for s in (name, single, double) if s is not None))
        position = match.end()
    return tuple(steps)


def follow_json_path(document: Any, steps: tuple[str | int, ...]) -> Any:
    """The value at ``steps`` in ``document``, or ``_MISSING``."""
    for step in steps:
        if isinstance(step, int):
            if not isinstance(document, list) or not -len(document) <= step < len(document):
                return _MISSING
        elif not isinstance(document, dict) or step not in document:
            return _MISSING
        document = document[step]
    return document


def _json_equal(found: Any, expected: Any) -> bool:
    # JSON true is not 1: Python's == would say it is.
    if isinstance(found, bool) != isinstance(expected, bool):
        return False
    return found == expected


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def probe_http(spec: ProbeSpec, params: HttpParams) -> ProbeResult:
    url = params.url
    expects_redirect = params.status is not None and 300 <= params.status < 400
    got = fetch(url, params.reach, spec.timeout + _SOCKET_TIMEOUT_SLACK, follow=not expects_redirect)
    if got.status is None:
        hint = "" if got.error.startswith("TLS") else "; is the service running?"
        where = f" (redirected to {got.url})" if got.redirects else ""
        return make_result(
            spec, url, finding=ENDPOINT_FAILING, details={"status": None, "redirects": got.redirects},
            reason=f"could not reach {url}{where}: {got.error}{hint}",
        )
    status, body = got.status, got.body
    details: dict[str, Any] = {"status": status, "bytes": len(body)}
    if got.redirects:
        details["redirects"] = got.redirects
    if got.truncated:
        details["truncated"] = True
    if got.refused:
        details["redirect"] = got.refused
        return make_result(spec, url, finding=ENDPOINT_FAILING, details=details, reason=f"{url}: {got.error}.")
    problems: list[str] = []
    if params.status is not None and status != params.status:
        problems.append(f"status {status}, expected {params.status}")
    text = body.decode(errors="replace")
    if params.contains is not None and params.contains not in text:
        problems.append(f"the body does not contain {params.contains!r}")
    wants_json = params.json_path is not None or params.equals is not msgspec.UNSET or params.at_least is not None
    if wants_json:
        where = params.json_path or "the JSON body"
        try:
            document = msgspec.json.decode(body)
        except (msgspec.DecodeError, RecursionError):  # a served body may nest without end
            problems.append("the body is not JSON")
        else:
            value = follow_json_path(document, parse_json_path(params.json_path or "$"))
            if value is _MISSING:
                problems.append(f"{where} is not in the JSON body")
            else:
                if params.json_path is not None:
                    details["value"] = value
                if params.equals is not msgspec.UNSET and not _json_equal(value, params.equals):
                    problems.append(f"{where} is {value!r}, expected {params.equals!r}")
                if params.at_least is not None:
                    if not _is_number(value):
                        problems.append(f"{where} is {value!r}, not a number")
                    elif value < params.at_least:
                        problems.append(f"{where} is {value!r}, expected at least {params.at_least!r}")
    mismatch = ""
    if not problems and params.expect_hash_of is not None:
        mismatch = _hash_mismatch(spec, params, body, details)
    if not problems and (params.deploy or params.expect_hash_of is not None):
        seen = _deploy_seen(params, body, details)
        if seen is not None:
            details["deploy"] = seen
    if mismatch:
        return make_result(spec, url, finding=DEPLOY_HASH_MISMATCH, details=details, reason=f"{url}: {mismatch}.")
    if not problems:
        return make_result(spec, url, reason=f"{url} answered {status} as expected.", details=details)
    more = f" (and {len(problems) - 1} more problems)" if len(problems) > 1 else ""
    return make_result(
        spec, url, finding=ENDPOINT_FAILING, details=details,
        reason=f"{url}: {problems[0]}{more}.",
        output=errors_first("\n".join(f"failed: {p}" for p in problems) + "\n" + text),
    )


def _hash_mismatch(spec: ProbeSpec, params: HttpParams, body: bytes, details: dict[str, Any]) -> str:
    """Why the served hash is not the local artifact's ("" when it is)."""
    artifact = resolve(spec, params.expect_hash_of)
    try:
        expected = sha256_file(artifact)
    except OSError as exc:
        return f"cannot hash the local artifact {params.expect_hash_of}: {exc.strerror or exc}"
    details["expected_hash"] = expected
    details["expected_size"] = artifact.stat().st_size
    if params.json_path is None:
        if details.get("truncated"):
            return f"the body is larger than [http] max_body ({params.reach.max_body} bytes): not hashed"
        served = hashlib.sha256(body).hexdigest()
        details["served_hash"] = served
        if served != expected:
            return f"the body's sha256 is {served[:12]}…, {params.expect_hash_of} has {expected[:12]}…"
        return ""
    value = details.get("value")
    served = _served(value)
    details["served_hash"] = served
    if len(served) < 7 or any(c not in "0123456789abcdef" for c in served) or not expected.startswith(served):
        return f"{params.json_path} is {value!r}, {params.expect_hash_of} has sha256 {expected[:12]}… (a deploy of another build?)"
    return ""


def _served(value: Any) -> str:
    """A served hash as compared: trimmed, lower case, no ``sha256:``."""
    return value.strip().lower().removeprefix("sha256:") if isinstance(value, str) else ""


def _deploy_seen(params: HttpParams, body: bytes, details: dict[str, Any]) -> dict[str, Any] | None:
    """The deploy this answer shows: ``{"url", "hash", "size"}`` (size None when the
    answer does not tell it), or None when it shows no hash."""
    if details.get("truncated"):
        return None
    if params.json_path is None:
        return {"url": params.url, "hash": hashlib.sha256(body).hexdigest(), "size": len(body)}
    served = _served(details.get("value"))
    if not served:
        return None
    expected = details.get("expected_hash", "")
    if len(served) >= 7 and expected.startswith(served):  # the artifact on disk: its full hash and size
        return {"url": params.url, "hash": expected, "size": details.get("expected_size")}
    return {"url": params.url, "hash": served, "size": None}


KIND = Kind("http", HttpParams, check, probe_http, target)
