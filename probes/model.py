"""What a probe is asked to check, and what it found.

A probe turns an agent's claim ("I wrote the file", "it builds", "it is deployed",
"the command worked") into a deterministic check: no LLM, no judgement, the same
inputs give the same verdict.  Two wire types carry it:

* ``ProbeSpec`` is the question.  ``kind`` picks the check, ``params`` holds the
  kind's arguments (their schema and meaning live with each kind in
  ``probes/kinds/``), ``cwd`` is the requesting agent's worktree: the probe runs
  there, and relative paths in ``params`` resolve against it.
* ``ProbeResult`` is the answer.  ``verdict`` is ``"pass"`` or ``"fail"``; a fail
  always carries a ``finding`` (a short fixed phrase from ``FINDINGS``, good for
  grouping and counting in the ledger) and a ``reason`` (one sentence a person can
  act on).  ``output`` is captured output, errors first and truncated with an
  explicit marker (``probes.output.errors_first``); ``details`` holds the
  kind-specific facts behind the verdict (hashes, counts, missing names).

Both are frozen msgspec Structs, so they encode to JSON / msgpack for the SQLite
ledger and the wire, and pickle for the worker processes.  A failing, crashing or
timing-out check is a ``ProbeResult`` with verdict ``"fail"``; only a malformed spec
raises, as ``ProbeError``.
"""

from __future__ import annotations

from typing import Any

import msgspec

from protocol.errors import LockstepError

# -- kinds --------------------------------------------------------------------------

KIND_WRITE = "write"
KIND_BUILD = "build"
KIND_COMMAND = "command"
KIND_HTTP = "http"
KIND_PROCESSES = "processes"
KIND_HANDOFF = "handoff"
KIND_CONSISTENCY = "consistency"
KIND_BUNDLE = "bundle"
KINDS: tuple[str, ...] = (
    KIND_WRITE, KIND_BUILD, KIND_COMMAND, KIND_HTTP, KIND_PROCESSES, KIND_HANDOFF, KIND_CONSISTENCY, KIND_BUNDLE,
)

# -- verdicts -----------------------------------------------------------------------

PASS = "pass"
FAIL = "fail"

# -- findings: the fixed phrases a failing result names -----------------------------

WRITE_LOST = "write lost"                    # file missing or its bytes differ
BUILD_PRODUCED_NOTHING = "build produced nothing"  # no artifact, or the same one
COMMAND_FAILED = "command failed"            # wrong exit status, or could not start
SIDE_EFFECT_MISSING = "side effect missing"  # exit fine, `creates` not created/changed
TIMED_OUT = "timed out"                      # killed at the spec's timeout
ENDPOINT_FAILING = "endpoint failing"        # unreachable, wrong status or content
PROCESSES_MISSING = "processes missing"      # fewer matching processes than expected
PROCESSES_UNEXPECTED = "unexpected processes"  # more than expected, with exact=True
HANDOFF_INCOMPLETE = "handoff incomplete"    # handoff note missing or below threshold
PROBE_CRASHED = "probe crashed"              # the check itself died (bug or kill)
NOT_RUN = "not run"                          # an autofix check after a failed read-only one
CHANGED_HELD_PATHS = "changed held paths"    # an autofix check rewrote paths others hold (undone)
WORKER_LOST = "worker lost"                  # a remote agent's worker went away while running its checks
VALUES_DISAGREE = "values disagree"          # consistency: the sources do not all give one value
DEPLOY_HASH_MISMATCH = "deploy hash mismatch"  # http expect_hash_of: served hash is not the local artifact's
BUNDLE_ROLLED_BACK = "bundle rolled back"    # bundle: a deploy served an older bundle than one before it
BUNDLE_TOO_LARGE = "bundle too large"        # bundle: a deploy served a bundle over max_size
FINDINGS: tuple[str, ...] = (
    WRITE_LOST, BUILD_PRODUCED_NOTHING, COMMAND_FAILED, SIDE_EFFECT_MISSING, TIMED_OUT,
    ENDPOINT_FAILING, PROCESSES_MISSING, PROCESSES_UNEXPECTED, HANDOFF_INCOMPLETE,
    PROBE_CRASHED, NOT_RUN, CHANGED_HELD_PATHS, WORKER_LOST, VALUES_DISAGREE, DEPLOY_HASH_MISMATCH,
    BUNDLE_ROLLED_BACK, BUNDLE_TOO_LARGE,
)

DEFAULT_TIMEOUT = 60.0
# A probe's timeout is bounded both ways: under 10 ms nothing can run (a --timeout of
# 5e-324 "timed out" a check that never started), and past a day a hung check would
# hold its job for ever in practice (a --timeout of 1e308 was accepted).
MIN_TIMEOUT = 0.01
MAX_TIMEOUT = 86400.0


class ProbeError(LockstepError):
    """A probe spec is malformed: unknown kind, bad params, refused target.

    Raised before anything runs, never for a check that merely fails.  The spec
    usually comes from an agent, so the coordinator answers it as a ``bad_request``
    error and keeps serving.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class ProbeSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One check to run.  ``params`` is kind-specific: see ``probes/kinds/``."""

    name: str
    kind: str
    params: dict[str, Any] = {}
    timeout: float = DEFAULT_TIMEOUT
    # True when the check may modify the worktree (a formatter, a fixer): such probes
    # run after every read-only one and never two at a time.
    autofix: bool = False
    # Absolute path of the requesting agent's worktree; None means the coordinator's
    # working directory.
    cwd: str | None = None


class ProbeResult(msgspec.Struct, frozen=True, kw_only=True):
    """What one check found.  ``finding`` is None exactly when ``verdict`` is pass."""

    name: str
    kind: str
    target: str  # the command line, path or URL that was checked
    verdict: str
    # The real exit status of a command (negative: killed by that signal, as
    # subprocess reports it); None when killed at the timeout or not a command.
    exit_code: int | None = None
    duration: float = 0.0  # seconds the check itself took
    finding: str | None = None
    reason: str = ""
    output: str = ""
    details: dict[str, Any] = {}

    @property
    def passed(self) -> bool:
        return self.verdict == PASS


def encode_result(result: ProbeResult) -> bytes:
    """JSON bytes of a result, as the ledger stores it."""
    return msgspec.json.encode(result)


def decode_result(data: bytes | str) -> ProbeResult:
    return msgspec.json.decode(data, type=ProbeResult)


def decode_spec(data: bytes | str) -> ProbeSpec:
    """Parse a JSON spec; any schema error becomes a ``ProbeError``."""
    try:
        return msgspec.json.decode(data, type=ProbeSpec)
    except msgspec.DecodeError as exc:  # ValidationError is a DecodeError
        raise ProbeError(f"malformed probe spec: {exc}") from None
