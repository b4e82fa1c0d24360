"""``bundle``: the deploy history moves forward, and bundles stay within a size budget.

Params: ``url`` (optional: judge only the deploys seen at this URL, spelled as the
``http`` probe's ``url``; default every URL with recorded deploys, each on its own
history), ``window`` (default 1h), ``max_size`` (optional, bytes or "250KB").

The history is the ledger's ``deploy.seen`` records (what ``http`` probes with
``deploy`` or ``expect_hash_of`` saw, one record each time a URL's hash changed); the
coordinator fills it in at run time (``deploys``, oldest first, with ``now``), never
the file.

Theory
------
"Older" is the order of first sight: of two bundles, the older is the one whose hash
the recorded history shows first at that URL.  A deploy is a rollback when it serves a
bundle older than the newest one served before it there (A, B, A: the second A is a
rollback; A, B, A, B: the last B is not, B is the newest again).  Only deploys inside
the window are judged, against the whole recorded history before them, so a rollback
is a finding (``bundle rolled back``) for ``window`` after it was seen, then clears.
With ``max_size``: a deploy in the window, or the latest one of a URL (what it serves
now), whose size is known and over the budget is ``bundle too large``.  A deploy whose
size the server did not tell (a hash read from a JSON value with no artifact to match)
is not judged by size.  A rollback outranks a size as the finding; the reason and the
details name every problem.

``judge`` is pure (the history and ``now`` are parameters); ``probe_bundle`` only reads
the clock when no ``now`` was given.
"""

from __future__ import annotations

import time
from typing import Annotated

import msgspec

from probes.kinds import Kind
from probes.kinds.common import Params, make_result
from probes.model import BUNDLE_ROLLED_BACK, BUNDLE_TOO_LARGE, ProbeResult, ProbeSpec
from probes.schema import RUNTIME_ONLY, Bytes, HttpUrl, PositiveSeconds, in_toml

DEFAULT_WINDOW = 3600.0


class Deploy(msgspec.Struct, frozen=True, array_like=True):
    """One ``deploy.seen``: ``[url, hash, size, at]`` (``at``: wall-clock seconds)."""

    url: str
    hash: str
    size: int | None
    at: float


class BundleParams(Params):
    url: Annotated[str | None, in_toml(HttpUrl)] = None
    window: Annotated[float, in_toml(PositiveSeconds)] = DEFAULT_WINDOW
    max_size: Annotated[int | None, in_toml(Bytes)] = None
    deploys: Annotated[list[Deploy], RUNTIME_ONLY] = []  # the recorded history, oldest first
    now: Annotated[float | None, RUNTIME_ONLY] = None  # wall clock of the run


class Judgement(msgspec.Struct, frozen=True):
    rollbacks: list[str]
    too_large: list[str]
    judged: int  # deploys inside the window
    newest: dict[str, str]  # url -> hash of the newest bundle it has served


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(at))


def _short(digest: str) -> str:
    return digest[:12] + "…" if len(digest) > 12 else digest


def judge(deploys: list[Deploy], now: float, window: float, max_size: int | None, url: str | None = None) -> Judgement:
    """Rollbacks and oversized bundles among ``deploys`` (oldest first) at ``now``."""
    by_url: dict[str, list[Deploy]] = {}
    for deploy in deploys:
        if url is None or deploy.url == url:
            by_url.setdefault(deploy.url, []).append(deploy)
    rollbacks: list[str] = []
    too_large: list[str] = []
    newest: dict[str, str] = {}
    judged = 0
    since = now - window
    for where, history in by_url.items():
        first_seen: dict[str, int] = {}  # hash -> rank in the order of first sight
        newest_rank, newest_hash, newest_at = -1, "", 0.0
        for index, deploy in enumerate(history):
            rank = first_seen.setdefault(deploy.hash, len(first_seen))
            inside = deploy.at >= since
            judged += inside
            if inside and rank < newest_rank:
                rollbacks.append(
                    f"{where} served {_short(deploy.hash)} again at {_when(deploy.at)}, after the newer "
                    f"{_short(newest_hash)} (first seen {_when(newest_at)})"
                )
            latest = index == len(history) - 1
            if max_size is not None and (inside or latest) and deploy.size is not None and deploy.size > max_size:
                too_large.append(f"{where} served {_short(deploy.hash)} of {deploy.size} bytes at {_when(deploy.at)} (max_size {max_size})")
            if rank > newest_rank:
                newest_rank, newest_hash, newest_at = rank, deploy.hash, deploy.at
        newest[where] = newest_hash
    return Judgement(rollbacks=rollbacks, too_large=too_large, judged=judged, newest=newest)


def check(label: str, params: BundleParams) -> None:
    return None  # the types say it all: url is only a filter, never fetched


def target(spec: ProbeSpec, params: BundleParams) -> str:
    return params.url or "every deployed URL"


def probe_bundle(spec: ProbeSpec, params: BundleParams) -> ProbeResult:
    now = params.now if params.now is not None else time.time()
    found = judge(params.deploys, now, params.window, params.max_size, params.url)
    where = params.url or "any URL"
    details = {
        "judged": found.judged, "newest": found.newest, "rollbacks": found.rollbacks, "too_large": found.too_large,
        "window": params.window,
    }
    problems = found.rollbacks + found.too_large
    if not found.newest:
        return make_result(spec, target(spec, params), details=details, reason=f"no deploy of {where} recorded yet: nothing to judge")
    if not problems:
        size = f", each within {params.max_size} bytes" if params.max_size is not None else ""
        return make_result(
            spec, target(spec, params), details=details,
            reason=f"{found.judged} deploy(s) of {where} in the last {params.window:g}s, none older than one before it{size}",
        )
    finding = BUNDLE_ROLLED_BACK if found.rollbacks else BUNDLE_TOO_LARGE
    more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
    return make_result(
        spec, target(spec, params), finding=finding, details=details, reason=f"{problems[0]}{more}",
        output="\n".join(problems) + "\n" if len(problems) > 1 else "",
    )


KIND = Kind("bundle", BundleParams, check, probe_bundle, target)
