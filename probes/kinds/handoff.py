"""``handoff``: the handoff note an agent leaves is complete enough.

Params: ``path`` (the handoff note), ``threshold`` (default 85), ``repo_root`` (default
``spec.cwd``; filled in at run time).  Scored by ``probes.handoff.score_handoff``;
missing note or below threshold -> ``handoff incomplete``.
"""

from __future__ import annotations

import os
from typing import Annotated

import msgspec

from probes.kinds import Kind
from probes.kinds.common import Params, make_result, resolve
from probes.model import HANDOFF_INCOMPLETE, ProbeError, ProbeResult, ProbeSpec
from probes.schema import RUNTIME_ONLY, RelPath, in_toml


class HandoffParams(Params):
    path: Annotated[str, in_toml(RelPath)]
    threshold: Annotated[int, in_toml(Annotated[int, msgspec.Meta(ge=0, le=100)])] = 85
    repo_root: Annotated[str | None, RUNTIME_ONLY] = None


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

    path = resolve(spec, params.path)
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return make_result(
            spec, str(path), finding=HANDOFF_INCOMPLETE,
            details={"score": 0, "threshold": params.threshold, "missing": [f"no handoff note at {path}"]},
            reason=f"no readable handoff note at {path} ({exc.strerror or exc}); write it before handing off.",
        )
    repo_root = params.repo_root or spec.cwd or os.getcwd()
    score = score_handoff(text, repo_root, params.threshold)
    details = msgspec.to_builtins(score)  # score, threshold, passed, breakdown, missing...
    if score.passed:
        return make_result(
            spec, str(path), details=details,
            reason=f"the handoff note scores {score.score} (threshold {params.threshold}).",
        )
    listed = f"; first gap: {score.missing[0]}" if score.missing else ""
    return make_result(
        spec, str(path), finding=HANDOFF_INCOMPLETE, details=details,
        reason=f"the handoff note scores {score.score}, below the threshold {params.threshold}{listed}.",
    )


KIND = Kind("handoff", HandoffParams, check, probe_handoff, target)
