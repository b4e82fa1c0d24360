"""Gate policy: who conflicts with whom, and what each mode decides about it.

Rules
-----
* A claim by agent A on pattern P conflicts with another agent's live claim Q when P
  and Q overlap (some path could match both) and at least one of them is exclusive.
* A write intent is an exclusive use of a concrete path: it conflicts with every other
  agent's claim on it, exclusive or shared, unless A itself holds the path (then only
  other agents' *exclusive* claims conflict: co-holders of a shared claim may write).
* A hold (a stale holder's path during ``lock_delay``) conflicts with everyone but the
  former holder, in every mode: the holder may still be writing.  So does a merge hold
  (a released path whose commits have not reached main, see mergeholds.py).
* ``serial``: while another agent holds any exclusive claim, everything is refused,
  naming that writer.
* Verdicts: ``parallel-strict`` and ``serial`` refuse on any conflict;
  ``parallel-warn`` grants with the conflicts as warnings, except holds, which refuse.
* A restart in a stricter mode may find claims granted under a laxer one that now
  conflict: of each conflict the oldest grant (lowest token) stays, the others are
  revoked (``restart_revocations``), so there are never two writers in a mode that
  refuses conflicts.

Everything here reads the registry and returns plain values; nothing changes state.
"""

from __future__ import annotations

from protocol.messages import Conflict
from protocol.paths import Pattern, PatternIndex

from .registry import ClaimEntry, Hold, Registry


def _claim_conflict(entry: ClaimEntry) -> Conflict:
    return Conflict(
        holder=entry.agent,
        pattern=entry.pattern.text,
        access=entry.access,
        token=entry.token,
        reason=f"held {entry.access}ly by {entry.agent} (token {entry.token})"
        if entry.access == "exclusive"
        else f"shared by {entry.agent} (token {entry.token})",
    )


def _hold_conflict(hold: Hold, now: float) -> Conflict:
    left = max(0.0, hold.until - now)
    return Conflict(
        holder=hold.former,
        pattern=hold.pattern.text,
        access="held",
        token=hold.token,
        reason=f"was held by {hold.former}, who went stale; free in {left:.1f}s",
        retry_after=round(left, 3),
    )


def hold_conflicts(registry: Registry, agent: str, pattern: Pattern, now: float) -> list[Conflict]:
    if not registry.holds:  # the usual case: skip the index walk
        return []
    return [
        _hold_conflict(hold, now)
        for _, hold in registry.holds.overlapping(pattern)
        if hold.former != agent and hold.until > now
    ]


def claim_conflicts(
    registry: Registry, agent: str, pattern: Pattern, access: str
) -> list[Conflict]:
    overlapping = registry.claims.overlapping(pattern)
    if not overlapping:  # the usual claim: no comprehension to run
        return []
    return [
        _claim_conflict(entry)
        for _, entry in overlapping
        if entry.agent != agent and (access == "exclusive" or entry.access == "exclusive")
    ]


def serial_conflicts(registry: Registry, agent: str) -> list[Conflict]:
    """In serial mode: the other agent(s) currently writing."""
    conflicts = []
    for writer in registry.exclusive_holders():
        if writer == agent:
            continue
        entry = next(e for e in registry.entries_of(writer) if e.access == "exclusive")
        conflicts.append(
            Conflict(
                holder=writer,
                pattern=entry.pattern.text,
                access=entry.access,
                token=entry.token,
                reason=f"serial mode: {writer} is writing (holds {entry.pattern.text})",
            )
        )
    return conflicts


def intent_view(
    registry: Registry, agent: str, path: Pattern
) -> tuple[list[ClaimEntry], list[Conflict]]:
    """For a write to the concrete ``path``: ``agent``'s own claims that cover it, and
    the other agents' claims in the way (with no own claim, shared ones are in the way
    too: writing is exclusive use)."""
    overlapping = [entry for _, entry in registry.claims.overlapping(path)]
    own = [e for e in overlapping if e.agent == agent]
    conflicts = [
        _claim_conflict(e) for e in overlapping if e.agent != agent and (not own or e.access == "exclusive")
    ]
    return own, conflicts


def refuses(mode: str, conflicts: list[Conflict]) -> bool:
    """Does ``mode`` refuse in the face of these conflicts?"""
    if not conflicts:
        return False
    if mode == "parallel-warn":
        return any(c.access in ("held", "merge-hold") for c in conflicts)
    return True


def summarise(conflicts: list[Conflict]) -> str:
    """One sentence naming every conflicting holder and pattern."""
    parts = []
    seen = set()
    for c in conflicts:
        key = (c.holder, c.pattern, c.reason)
        if key not in seen:
            seen.add(key)
            parts.append(f"{c.pattern}: {c.reason}")
    return "; ".join(parts)


def restart_revocations(registry: Registry, mode: str) -> list[tuple[ClaimEntry, ClaimEntry]]:
    """The grants ``mode`` would never have made together: ``(revoked, kept)`` pairs,
    where ``kept`` is the older grant each revoked one conflicts with.

    Grants are taken oldest first (token order) and each is kept unless it conflicts
    with one kept before it (the claim rules; in ``serial`` also any other agent's kept
    exclusive claim).  ``parallel-warn`` grants over conflicts, so it revokes nothing."""
    if mode == "parallel-warn":
        return []
    kept: PatternIndex[ClaimEntry] = PatternIndex()
    writer: ClaimEntry | None = None  # serial: the oldest kept exclusive grant
    revoked = []
    for entry in sorted(registry.all_entries(), key=lambda e: (e.token, e.pattern.text)):
        older = next(
            (
                other for _, other in kept.overlapping(entry.pattern)
                if other.agent != entry.agent and "exclusive" in (entry.access, other.access)
            ),
            None,
        )
        if older is None and mode == "serial" and entry.access == "exclusive" and writer is not None and writer.agent != entry.agent:
            older = writer
        if older is not None:
            revoked.append((entry, older))
            continue
        kept.add(entry.pattern, entry)
        if entry.access == "exclusive" and writer is None:
            writer = entry
    return revoked
