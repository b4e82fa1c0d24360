"""``handoff``: the handoff note an agent leaves is complete enough, and true.

Params: ``path`` (the handoff note), ``threshold`` (default 85), and, filled in at run
time by the coordinator: ``repo_root`` (default ``spec.cwd``), ``agent`` (whose note it
is), ``base`` (the branch its work is compared with) and ``known`` (what the ledger knows
of the agent: the ``written``, ``claimed`` and ``verify`` fields of
``probes.handoff_facts.Evidence``).  With ``known`` the note's claims are checked: this
module asks git the rest (what changed since the base, which cited commits exist,
which files define the cited tests).  Scored by ``probes.handoff.score_handoff``;
missing note, below threshold or a false fact -> ``handoff incomplete``.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path
from typing import Annotated, Any

import msgspec

from probes.kinds import Kind
from probes.kinds.common import Params, make_result, resolve
from probes.model import HANDOFF_INCOMPLETE, ProbeError, ProbeResult, ProbeSpec
from probes.schema import RUNTIME_ONLY, RelPath, in_toml
from protocol.files import read_regular

HANDOFF_LIMIT = 4 * 1024 * 1024  # a note longer than this is not one a person reads


class HandoffParams(Params):
    path: Annotated[str, in_toml(RelPath)]
    threshold: Annotated[int, in_toml(Annotated[int, msgspec.Meta(ge=0, le=100)])] = 85
    repo_root: Annotated[str | None, RUNTIME_ONLY] = None
    agent: Annotated[str | None, RUNTIME_ONLY] = None
    base: Annotated[str | None, RUNTIME_ONLY] = None
    known: Annotated[dict[str, Any] | None, RUNTIME_ONLY] = None


def check(label: str, params: HandoffParams) -> None:
    if not 0 <= params.threshold <= 100:
        raise ProbeError(f"{label}: threshold must be between 0 and 100")
    if params.repo_root is not None and not os.path.isabs(params.repo_root):
        raise ProbeError(f"{label}: repo_root must be an absolute path")


def target(spec: ProbeSpec, params: HandoffParams) -> str:
    return str(resolve(spec, params.path))


def probe_handoff(spec: ProbeSpec, params: HandoffParams) -> ProbeResult:
    # Imported here: probes.handoff is its own module with its own rubric, and only
    # this kind needs it.
    from probes.handoff import score_handoff
    from probes.handoff_facts import Evidence

    path = resolve(spec, params.path)
    try:
        text = read_regular(path, HANDOFF_LIMIT).decode("utf-8", errors="replace")
    except OSError as exc:
        return make_result(
            spec, str(path), finding=HANDOFF_INCOMPLETE,
            details={"score": 0, "threshold": params.threshold, "missing": [f"no handoff note at {path}"]},
            reason=f"no readable handoff note at {path} ({exc.strerror or exc}); write it before handing off.",
        )
    repo_root = params.repo_root or spec.cwd or os.getcwd()
    evidence = None
    if params.known is not None:
        try:
            known = msgspec.convert(params.known, Evidence)
        except msgspec.ValidationError as exc:
            raise ProbeError(f"handoff: malformed evidence from the coordinator: {exc}") from None
        evidence = gather_evidence(text, Path(repo_root), params.agent, params.base, known)
    score = score_handoff(text, repo_root, params.threshold, evidence)
    details = _bounded(msgspec.to_builtins(score))  # score, threshold, passed, breakdown, missing, facts...
    details["agent"] = params.agent
    if score.passed:
        return make_result(
            spec, str(path), details=details,
            reason=f"the handoff note scores {score.score} (threshold {params.threshold}).",
        )
    false = [f.note for f in score.facts if not f.holds]
    listed = f"; {len(false)} false fact{'s' if len(false) != 1 else ''}, first: {false[0]}" if false else (
        f"; first gap: {score.missing[0]}" if score.missing else ""
    )
    return make_result(
        spec, str(path), finding=HANDOFF_INCOMPLETE, details=details,
        reason=f"the handoff note scores {score.score} (threshold {params.threshold}){listed}.",
    )


# Items of each list of a result's details kept (the rest counted in ``KEY_omitted``):
# a note citing 300,000 commits made a 300,000-fact result, hundreds of MB through the
# coordinator and into the ledger.  The score and the reason are computed from them all.
LISTED = 100
NOTE_CHARS = 2000  # a breakdown note ("missing: a, b, c ...") is cut here


def _bounded(details: dict[str, Any]) -> dict[str, Any]:
    """``details`` with each list cut to ``LISTED`` items; of the facts, the false ones
    are kept first (the ones to act on), in document order."""
    facts = details.get("facts") or []
    if len(facts) > LISTED:
        false = [i for i, f in enumerate(facts) if not f.get("holds")][:LISTED]
        holding = [i for i, f in enumerate(facts) if f.get("holds")][: LISTED - len(false)]
        details["facts"] = [facts[i] for i in sorted(false + holding)]
        details["facts_omitted"] = len(facts) - len(details["facts"])
    for key in ("missing", "missing_files", "filler"):
        items = details.get(key)
        if isinstance(items, list) and len(items) > LISTED:
            details[key] = items[:LISTED]
            details[f"{key}_omitted"] = len(items) - LISTED
    for part in details.get("breakdown") or []:
        note = part.get("note") if isinstance(part, dict) else None
        if isinstance(note, str) and len(note) > NOTE_CHARS:
            part["note"] = note[:NOTE_CHARS] + f" … [{len(note) - NOTE_CHARS} characters not shown]"
    return details


# ---------------------------------------------------------------- what git knows


def gather_evidence(text: str, root: Path, agent: str | None, base: str | None, known: Any) -> Any:
    """``known`` (what the ledger knows) completed with what git knows of ``root``:
    the paths changed since ``base`` (committed or not, untracked included), which
    commits the note cites exist, which files define the tests it cites, and which
    tokens of each verify check's command are paths."""
    from probes import handoff_facts as facts

    top = _git(root, "rev-parse", "--show-toplevel")
    if top is None:
        return msgspec.structs.replace(known, agent=agent, git=False, base=base or "")
    changed: list[str] = []
    base_commit = _git(root, "merge-base", "HEAD", base) if base else None
    since = base_commit or ("HEAD" if _git(root, "rev-parse", "--verify", "-q", "HEAD") else None)
    if since:
        changed += (_git(root, "diff", "--name-only", "-z", since, "--", ".", raw=True) or "").split("\0")
    changed += (_git(root, "ls-files", "--others", "--exclude-standard", "-z", raw=True) or "").split("\0")
    return msgspec.structs.replace(
        known, agent=agent, git=True, base=base or ("HEAD" if since == "HEAD" else ""),
        changed=sorted({c for c in changed if c}), commits=_commits(root, facts.cited_commits(text)),
        defined_in=_defined_in(root, facts.cited_test_names(text)), verify=_with_paths(known.verify, root),
    )


def _commits(root: Path, cited: list[str]) -> dict[str, bool]:
    """Which ``cited`` ids name a commit: one ``git cat-file --batch-check`` for all."""
    if not cited:
        return {}
    out = _git(root, "cat-file", "--batch-check=%(objecttype)", raw=True, stdin="".join(f"{c}^{{commit}}\n" for c in cited)) or ""
    answers = out.splitlines()
    return {c: i < len(answers) and answers[i].strip() == "commit" for i, c in enumerate(cited)}


def _defined_in(root: Path, names: list[str]) -> dict[str, list[str]]:
    """The test files that mention each test name: one ``git grep`` for all."""
    from probes import handoff_facts as facts

    found: dict[str, list[str]] = {name: [] for name in names}
    if not names:
        return found
    patterns = [arg for name in names for arg in ("-e", name)]
    out = _git(root, "grep", "-o", "-w", "--untracked", "-I", *patterns, "--", ".", raw=True) or ""
    for line in out.splitlines():
        file, _, name = line.rpartition(":")
        if name in found and facts.is_test_file(file) and file not in found[name]:
            found[name].append(file)
    return found


def _with_paths(verify: Any, root: Path) -> Any:
    """The verify run with, for each check, the tokens of its command that are paths."""
    if verify is None:
        return None
    checks = [msgspec.structs.replace(c, paths=_command_paths(c.target, root)) for c in verify.checks]
    return msgspec.structs.replace(verify, checks=checks)


def _command_paths(command: str, root: Path) -> list[str]:
    """The tokens of ``command`` that are paths of the repository (repo-relative)."""
    try:
        tokens = shlex.split(command)
    except ValueError:
        tokens = command.split()
    found = []
    for token in tokens[1:]:
        if token.startswith("-") or "=" in token:
            continue
        path = token.split("::", 1)[0]
        if path in (".", "./"):
            found.append(".")
        elif path and (root / path).exists():
            found.append(os.path.normpath(path))
    return found


def _git(root: Path, *args: str, raw: bool = False, stdin: str | None = None) -> str | None:
    """git's output in ``root`` (stripped unless ``raw``), or None when it fails."""
    try:
        done = subprocess.run(
            ["git", "-c", "core.quotePath=false", *args], cwd=root, capture_output=True, text=True, timeout=30, input=stdin,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    return done.stdout if raw else done.stdout.strip()


KIND = Kind("handoff", HandoffParams, check, probe_handoff, target)
