"""The coordinator's settings: one schema for the ``serve`` flags, ``[coordinator]``,
``[verify]``, ``[land]``, ``[ledger]`` and ``[handoff]`` in ``lockstep.toml``, the defaults and the documentation table.

Each setting is one annotated field below: its type and range (checked when the file or
the flags are decoded), its default, its meaning, and the ``serve`` flag that sets it,
if any.  ``agents/cli/serve.py`` generates its options from these fields,
``coordinator/settings.py`` its flat ``Settings`` Struct, and ``settings_table()`` the
README's "Configuration and defaults" table (a test checks the README matches).

Precedence: ``serve`` flags > ``lockstep.toml`` > these defaults.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

import msgspec
from msgspec import Meta

from probes.schema import (
    Age,
    PositiveSeconds,
    Seconds,
    Size,
    Table,
    format_age,
    format_duration,
    format_size,
)
from protocol.messages import MIN_TTL

Mode = Literal["parallel-strict", "parallel-warn", "serial"]
FreshBase = Literal["block", "warn", "off"]
Fsync = Literal["process-crash", "power-loss"]
VerifyPolicy = Literal["after-each-edit-batch", "before-final-answer", "off"]
MODES: tuple[str, ...] = get_args(Mode)
VERIFY_POLICIES: tuple[str, ...] = get_args(VerifyPolicy)


def setting(meaning: str, *, flag: str | None = None, metavar: str | None = None,
            seconds: tuple[float, float | None] | None = None) -> Meta:
    """A field's documentation: what it means and the ``serve`` flag that sets it.

    A flag starting with ``--no-`` turns a boolean setting off.  ``seconds``: a duration's
    (least, most) in seconds (None: no most), which the coordinator holds it to when it
    starts (``coordinator.settings``)."""
    return Meta(description=meaning, extra={"flag": flag, "metavar": metavar, "seconds": seconds})


class CoordinatorConfig(Table):
    """``[coordinator]``: the coordinator's tunables, read when ``serve`` starts."""

    mode: Annotated[Mode, setting(
        "conflict policy: block a conflicting writer before it writes / warn it / one writer at a time",
        flag="--mode",
    )] = "parallel-strict"
    heartbeat: Annotated[PositiveSeconds, setting(
        "interval between an agent's heartbeats", flag="--heartbeat", metavar="S", seconds=(0.01, 86400.0),
    )] = 1.0
    liveness: Annotated[int, Meta(ge=1, le=100), setting(
        "heartbeats missed before an agent is stale: stale after heartbeat × liveness of silence",
        flag="--liveness", metavar="N",
    )] = 3
    lock_delay: Annotated[Seconds, setting(
        "how long a stale holder that may still be alive keeps its paths before anyone else may take them", flag="--lock-delay", metavar="S",
        seconds=(0.0, 86400.0),
    )] = 10.0
    auto_claim: Annotated[bool, setting(
        "in the parallel modes, an allowed write intent on an unclaimed path claims it for the writer", flag="--no-auto-claim",
    )] = True
    oneshot_ttl: Annotated[PositiveSeconds, setting(
        "life of a session opened by a one-shot CLI call (renewed by each call of that agent)",
        flag="--oneshot-ttl", metavar="S", seconds=(MIN_TTL, 86400.0),
    )] = 900.0
    fresh_base: Annotated[FreshBase, setting(
        "a write or claim of a path that the integration branch changed in a commit the agent's HEAD lacks "
        "(a stale base: a merge conflict later): block it / warn / off (parallel-warn mode only warns)",
        flag="--fresh-base",
    )] = "block"
    fsync: Annotated[Fsync, setting(
        "what an answered request survives: a killed coordinator (commits are not fsynced) / also power loss "
        "and kernel crashes (every batch is fsynced before its replies leave; the default with --curve; "
        "see Durability in the README)",
        flag="--fsync",
    )] = "process-crash"
    reply_budget: Annotated[int, Meta(ge=1, le=4096), setting(
        "MiB of replies one client has not read that the coordinator keeps for it; past that the client is cut off "
        "(its unread replies dropped, a `peer.cut_off` event) and its session goes on",
    )] = 16
    integration_branch: Annotated[str, setting(
        "the branch agents merge into (default: the branch checked out in the main worktree, else main or master)",
        flag="--integration-branch", metavar="BRANCH",
    )] = ""


class VerifyConfig(Table):
    """``[verify]``: when the suite runs and how many repair rounds an agent gets."""

    policy: Annotated[VerifyPolicy, setting(
        "when the verify suite runs: after every batch of edits, when the agent says it is done, "
        "or never (then `done` is not gated)",
    )] = "before-final-answer"
    max_repair_loops: Annotated[int, Meta(ge=0, le=100), setting(
        "failing verify rounds per agent turn before verify stops re-running and the failure report stands",
    )] = 3
    turn_gate: Annotated[bool, setting(
        "at the end of an agent's turn (the Stop hooks `lockstep hook install` registers), run verify on "
        "its worktree's content unless that content already passed, and block the stop while it fails "
        "(at most max_repair_loops times a turn); false lets every turn end unchecked",
    )] = True
    # These two are read from the worktree's lockstep.toml at each run, like [checks].
    venv: Annotated[str, setting(
        "the Python virtual environment checks run in, relative to the worktree (default: detected; "
        "see \"Where and how checks run\" in docs/config.md); read at each verify run",
    )] = ""
    env: Annotated[dict[str, str], setting(
        "variables set for every check (a check's own `env` wins); read at each verify run",
    )] = {}


class LandConfig(Table):
    """``[land]``: how work reaches the integration branch (``lockstep land``)."""

    required: Annotated[bool, setting(
        "the turn-end gate requires a landing instead of a passing verify: a turn ends only when the "
        "agent's branch, at its current commit, has landed on the integration branch (the Stop hook lands "
        "it through the merge queue), or the landing's refusal was reported back to the agent; "
        "uncommitted changes block the stop once, asking for a commit",
    )] = False
    batch: Annotated[int, Meta(ge=1, le=64), setting(
        "landings verified together: up to this many queued branches are merged one onto the other and "
        "verified in one run; on a failure the batch is bisected for the first landing that breaks it "
        "(refused), those before it land, those after it go round again; 1: one landing at a time",
    )] = 1
    git_timeout: Annotated[PositiveSeconds, setting(
        "how long each git command of a landing may run (the merge, the scratch checkout, the move of the "
        "integration branch and of its checkout): past it git and the hooks it started (a `reference-transaction` "
        "hook that never returns) are ended and the landing is refused `blocked`, naming the command; the queue "
        "goes on with the next landing. The ref watcher's git reads (following the integration branch and the "
        "agents' branches, settling merge holds) have the same deadline: past it git is ended, the warning logged "
        "and the read tried again, and requests are judged on what the coordinator knew meanwhile", seconds=(0.01, 86400.0),
    )] = 120.0


class HandoffConfig(Table):
    """``[handoff]``: a passing handoff note as a precondition of ``lockstep done``."""

    required: Annotated[bool, setting(
        "`lockstep done` passes only after the agent's handoff note (`path`) passed `lockstep check handoff` "
        "since its last write: score at least `threshold` and every fact it states true (see docs/handoff.md)",
    )] = False
    path: Annotated[str, Meta(min_length=1), setting(
        "the handoff note, relative to the agent's worktree",
    )] = "HANDOFF.md"
    threshold: Annotated[int, Meta(ge=0, le=100), setting(
        "the lowest rubric score (0-100) that passes, whatever threshold the check was run with",
    )] = 85
    agents: Annotated[list[str], setting(
        "the agents the requirement applies to (empty: every agent)",
    )] = []


class LedgerConfig(Table):
    """``[ledger]``: the retention policy, applied by the coordinator while it serves."""

    keep: Annotated[Age, setting(
        "events older than this are removed from the ledger (hourly, in short slices while serving; "
        "what a restart needs is kept whatever its age: see \"Retention\" in the README)",
    )] = 30 * 86400.0
    max_size: Annotated[Size, setting(
        "size budget of the ledger file: past it the oldest events are removed, even younger than `keep`, "
        "until it is back under 80% of the budget, and the space is returned to the file system",
    )] = 10**9


# The [verify], [land] and [ledger] keys as the coordinator's flat Settings names them.
VERIFY_SETTING_NAMES = {
    "policy": "verify_policy", "max_repair_loops": "max_repair_loops", "turn_gate": "turn_gate", "venv": "verify_venv", "env": "verify_env",
}
LAND_SETTING_NAMES = {"required": "land_required", "batch": "land_batch", "git_timeout": "land_git_timeout"}
LEDGER_SETTING_NAMES = {"keep": "ledger_keep", "max_size": "ledger_max_size"}
HANDOFF_SETTING_NAMES = {"required": "handoff_required", "path": "handoff_path", "threshold": "handoff_threshold", "agents": "handoff_agents"}


class SettingInfo(msgspec.Struct, frozen=True):
    """One setting as the flags and the docs see it."""

    table: str  # "coordinator", "verify", "land", "ledger" or "handoff"
    key: str  # its key in that table
    name: str  # its name in the coordinator's Settings
    type: Any  # the annotation (for msgspec)
    default: Any
    meaning: str
    flag: str | None
    metavar: str | None
    choices: tuple[str, ...]  # for a Literal type; () otherwise
    minimum: int | None  # for an integer with a lower bound
    maximum: int | None = None  # for an integer with an upper bound
    seconds: tuple[float, float | None] | None = None  # a duration's (least, most) the coordinator holds it to
    unit: str = ""  # "age" or "size" for those custom types

    @property
    def default_text(self) -> str:
        if self.unit == "age":
            return format_age(self.default)
        if self.unit == "size":
            return format_size(self.default)
        if isinstance(self.default, bool):
            return "true" if self.default else "false"
        if isinstance(self.default, float):
            return format_duration(self.default)
        if self.default == "":
            return '""'
        if isinstance(self.default, dict):
            return "{}" if not self.default else str(self.default)
        if isinstance(self.default, list):
            return "[]" if not self.default else str(self.default)
        return str(self.default)

    @property
    def type_text(self) -> str:
        """The type column of docs/config.md."""
        if self.choices:
            return " \\| ".join(f"`{c}`" for c in self.choices)
        if self.unit == "age":
            return "duration or days (`30d`)"
        if self.unit == "size":
            return "size (`500MB`, `1GB`, `64MiB`) ≥ 1MB"
        if isinstance(self.default, bool):
            return "boolean"
        if isinstance(self.default, float) and self.seconds is not None:
            least, most = self.seconds
            if most is None:
                return f"duration ≥ {format_duration(least)}"
            return f"duration from {format_duration(least) if least else '0'} to {format_duration(most)}"
        if isinstance(self.default, float):
            return "duration ≥ 0" if self.minimum == 0 else "duration"
        if isinstance(self.default, str):
            return "string"
        if isinstance(self.default, dict):
            return "table of strings"
        if isinstance(self.default, list):
            return "list of strings"
        if self.minimum is not None and self.maximum is not None:
            return f"integer from {self.minimum} to {self.maximum}"
        return "integer" + (f" ≥ {self.minimum}" if self.minimum is not None else "")


def settings() -> tuple[SettingInfo, ...]:
    """Every setting of ``[coordinator]``, ``[verify]``, ``[land]``, ``[ledger]`` then ``[handoff]``, in declaration order."""
    import msgspec.inspect  # the type walk is only for flags and docs, not for decoding

    found: list[SettingInfo] = []
    tables = (("coordinator", CoordinatorConfig, {}), ("verify", VerifyConfig, VERIFY_SETTING_NAMES),
              ("land", LandConfig, LAND_SETTING_NAMES), ("ledger", LedgerConfig, LEDGER_SETTING_NAMES),
              ("handoff", HandoffConfig, HANDOFF_SETTING_NAMES))
    for table, struct, rename in tables:
        annotations = {f.name: f.type for f in msgspec.structs.fields(struct)}
        for field in msgspec.inspect.type_info(struct).fields:
            info = field.type
            extra = info.extra or {}
            inner = info.type
            found.append(
                SettingInfo(
                    table=table,
                    key=field.name,
                    name=rename.get(field.name, field.name),
                    type=annotations[field.name],
                    default=field.default if field.default is not msgspec.NODEFAULT else field.default_factory(),
                    meaning=info.extra_json_schema.get("description", ""),
                    flag=extra.get("flag"),
                    metavar=extra.get("metavar"),
                    choices=tuple(getattr(inner, "values", ())),
                    minimum=getattr(inner, "ge", None) if isinstance(inner, msgspec.inspect.IntType) else (
                        0 if isinstance(inner, msgspec.inspect.CustomType) and inner.cls is Seconds else None
                    ),
                    unit={Age: "age", Size: "size"}.get(getattr(inner, "cls", None), ""),
                    maximum=getattr(inner, "le", None) if isinstance(inner, msgspec.inspect.IntType) else None,
                    seconds=extra.get("seconds"),
                )
            )
    return tuple(found)


def settings_table() -> str:
    """The Markdown table of the README's "Configuration and defaults" section."""
    rows = [
        "| key (`lockstep.toml`) | flag | default | meaning |",
        "|---|---|---|---|",
    ]
    for s in settings():
        key = f"`{s.key}`" if s.table == "coordinator" else f"`[{s.table}] {s.key}`"
        flag = f"`{s.flag}`" if s.flag else "—"
        rows.append(f"| {key} | {flag} | `{s.default_text}` | {s.meaning} |")
    return "\n".join(rows) + "\n"


def config_table(table: str) -> str:
    """The Markdown table of ``[coordinator]``, ``[verify]``, ``[land]``, ``[ledger]`` or ``[handoff]`` in docs/config.md."""
    rows = ["| key | type | default | meaning |", "|---|---|---|---|"]
    for s in settings():
        if s.table == table:
            rows.append(f"| `{s.key}` | {s.type_text} | `{s.default_text}` | {s.meaning} |")
    return "\n".join(rows) + "\n"
