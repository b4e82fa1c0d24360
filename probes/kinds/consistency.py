"""``consistency``: N sources agree on one value.

Params: ``sources`` (two or more: http(s) URLs, reachable as for ``http``, or files
relative to the worktree), and what to read from each: ``json_path`` (a value in the
JSON body or file, as for ``http``), else ``header`` (an http response header; files
have none), else the sha256 of the whole body or file.  Passes only when every source
gives the same value; otherwise ``values disagree``, naming the odd ones out and the
majority value (the most common; ties go to the first source's).  A source that cannot
be read (unreachable, missing file, no such header or key, not JSON) gives no value:
it is an odd one out, with the reason.  No constant to compare with: the sources are
compared with each other.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Annotated, Any

import msgspec

from probes.fetch import fetch
from probes.kinds import Kind
from probes.kinds.common import Params, make_result, resolve
from probes.kinds.http import (
    _MISSING,
    _SOCKET_TIMEOUT_SLACK,
    check_reachable,
    follow_json_path,
    parse_json_path,
)
from probes.model import VALUES_DISAGREE, ProbeError, ProbeResult, ProbeSpec
from probes.reach import Reach
from probes.schema import RUNTIME_ONLY, Text, in_toml
from protocol.files import FileTooLarge, read_regular


class ConsistencyParams(Params):
    sources: Annotated[list[str], in_toml(list[Text])]
    json_path: Annotated[str | None, in_toml(Text)] = None
    header: Annotated[str | None, in_toml(Text)] = None
    reach: Annotated[Reach, RUNTIME_ONLY] = msgspec.field(default_factory=Reach)  # [http], as for http


def _is_url(source: str) -> bool:
    return source.startswith(("http://", "https://"))


def check(label: str, params: ConsistencyParams) -> None:
    if len(params.sources) < 2:
        raise ProbeError(f"{label}: sources needs two or more URLs or files to compare")
    for source in params.sources:
        if not source.strip():
            raise ProbeError(f"{label}: a source is empty")
        if _is_url(source):
            check_reachable(source, params.reach.allow)
        elif params.header is not None:
            raise ProbeError(f"{label}: header reads http responses; {source!r} is a file")
    if params.json_path is not None and params.header is not None:
        raise ProbeError(f"{label}: read json_path or header, not both")
    if params.json_path is not None:
        parse_json_path(params.json_path)


def target(spec: ProbeSpec, params: ConsistencyParams) -> str:
    return " ".join(params.sources)


def _read(spec: ProbeSpec, params: ConsistencyParams, source: str) -> tuple[Any, str]:
    """(the value, "") or (None, why there is none)."""
    header_value = None
    if _is_url(source):
        got = fetch(source, params.reach, spec.timeout + _SOCKET_TIMEOUT_SLACK)
        if got.status is None:
            return None, f"unreachable: {got.error}"
        if got.refused:
            return None, got.error
        if got.status >= 300:
            return None, f"answered {got.status}"
        if got.truncated and params.header is None:
            return None, f"its body is larger than [http] max_body ({params.reach.max_body} bytes)"
        body = got.body
        header_value = got.headers.get(params.header.lower()) if params.header else None
    else:
        try:
            body = read_regular(resolve(spec, source), params.reach.max_body)
        except FileTooLarge:
            return None, f"it is larger than [http] max_body ({params.reach.max_body} bytes)"
        except OSError as exc:
            return None, f"cannot read it: {exc.strerror or exc}"
    if params.header is not None:
        return (header_value, "") if header_value is not None else (None, f"no {params.header} header")
    if params.json_path is not None:
        try:
            document = msgspec.json.decode(body)
        except (msgspec.DecodeError, RecursionError):  # a served body may nest without end
            return None, "not JSON"
        value = follow_json_path(document, parse_json_path(params.json_path))
        return (value, "") if value is not _MISSING else (None, f"no {params.json_path} in it")
    return "sha256:" + hashlib.sha256(body).hexdigest(), ""


def probe_consistency(spec: ProbeSpec, params: ConsistencyParams) -> ProbeResult:
    values: dict[str, Any] = {}
    unreadable: dict[str, str] = {}
    sources = [str(source) for source in params.sources]  # plain strings: they go in the result's details
    for source in sources:
        value, why = _read(spec, params, source)
        if why:
            unreadable[source] = why
        else:
            values[source] = value
    keys = {source: msgspec.json.encode(value) for source, value in values.items()}  # JSON true is not 1
    counts = Counter(keys.values())
    majority_key = max(counts, key=lambda k: (counts[k], -list(keys.values()).index(k))) if counts else None
    majority = next((values[s] for s, k in keys.items() if k == majority_key), None)
    odd = [s for s in sources if s in unreadable or keys.get(s) != majority_key]
    what = str(params.json_path or (f"header {params.header}" if params.header else "content hash"))
    details = {"values": values, "unreadable": unreadable, "majority": majority, "odd": odd, "read": what}
    label = target(spec, params)
    if not odd:
        return make_result(spec, label, reason=f"all {len(values)} sources agree on {what}: {majority!r}", details=details)
    named = "; ".join(
        f"{s}: {unreadable[s]}" if s in unreadable else f"{s}: {values[s]!r}" for s in odd
    )
    agree = len(sources) - len(odd)
    reason = f"{len(odd)} of {len(sources)} sources disagree on {what} with the majority value {majority!r} ({agree} agree): {named}"
    return make_result(spec, label, finding=VALUES_DISAGREE, reason=reason, details=details)


KIND = Kind("consistency", ConsistencyParams, check, probe_consistency, target)
