"""The project's configuration: ``lockstep.toml`` at the repository root.

Theory
------
The file is the user's contract with Lockstep, so it is read strictly: every table and
key is known, every value is checked for type and range when the file is loaded, and
the first problem stops loading with a ``ConfigError`` whose message names the file, the
key and what is wrong.  A typo (``respone = "retry"``) must fail loudly, never fall
back to a default.  Nothing is read lazily later: once ``parse_config`` returns, every
value in the ``Config`` is valid, and durations are plain float seconds.

The schema is the Structs: ``ConfigFile`` below is what ``msgspec.toml`` decodes the
file into (unknown keys forbidden; durations, paths, names, regexes and URLs checked by
``probes.schema.dec_hook``); ``probes.tomlfile`` words its errors.  What one Struct
cannot say (a rule's parameters depend on its response, names must be unique, a rule's
``probe`` filter must name something) is checked after decoding, here.

Tables (all optional; docs/config.md documents each key, type and default):

``[coordinator]``, ``[verify]``, ``[land]``, ``[ledger]``, ``[handoff]``
    the coordinator's settings: ``probes.settings``.
``[checks.NAME]``
    the project's verify suite (``probes.suite``), one table per check, run in file order.  With no
    ``checks`` key at all the suite is auto-detected (``detect_suite``); an explicit
    empty ``[checks]`` table means "no checks" and turns detection off.
``[[probe]]``
    named probes (``kind`` plus that kind's parameters), scheduled when ``every`` is
    set.  The schema of each kind's table is derived from the kind's params Struct
    (``probe_table``).
``[[rule]]``
    findings -> responses; they precede ``probes.rules.DEFAULT_RULES``.
``[http]``
    what ``http`` and ``consistency`` probes may reach besides loopback (``probes.reach``).

This module is pure apart from ``load_config``/``detect_suite`` reading files; it starts
no process and reads no clock.
"""

from __future__ import annotations

import fnmatch
import re
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_type_hints

import msgspec

from probes.model import DEFAULT_TIMEOUT, FINDINGS, KINDS, ProbeSpec
from probes.reach import DEFAULT_CONNECT_TIMEOUT, DEFAULT_MAX_BODY
from probes.schema import (
    AllowedOrigin,
    Name,
    PositiveSeconds,
    RelPath,
    Size,
    Table,
    Text,
    Timeout,
    duration_problem,
)
from probes.settings import (
    MODES,
    VERIFY_POLICIES,
    CoordinatorConfig,
    HandoffConfig,
    LandConfig,
    LedgerConfig,
    VerifyConfig,
)
from probes.suite import DEFAULT_CHECK_TIMEOUT, Check, CheckTable, detect_suite
from probes.tomlfile import ConfigError, decode
from protocol.files import read_regular

__all__ = [
    "CONFIG_FILENAME", "DEFAULT_CHECK_TIMEOUT", "MODES", "VERIFY_POLICIES", "PROBE_KINDS", "RESPONSE_ACTIONS", "KNOWN_FINDINGS",
    "Check", "Config", "ConfigError", "CoordinatorConfig", "LandConfig", "Probe", "Rule", "VerifyConfig",
    "Check", "Config", "ConfigError", "CoordinatorConfig", "LedgerConfig", "Probe", "Rule", "VerifyConfig",
    "detect_suite", "load_config", "parse_config", "parse_duration", "probe_from_table", "probe_table",
]

CONFIG_FILENAME = "lockstep.toml"
CONFIG_LIMIT = 4 * 1024 * 1024  # far above any real configuration; a symlink to /dev/zero is not one

PROBE_KINDS = KINDS  # write, build, command, http, processes, handoff (probes.model)
ResponseAction = Literal["retry", "rollback", "restart", "touch", "notify", "block_agent", "queue_task"]
RESPONSE_ACTIONS: tuple[str, ...] = get_args(ResponseAction)

# The phrases Lockstep's probes report (probes.model.FINDINGS); a rule may name others
# (a custom phrase), but not one a typo away from these.
KNOWN_FINDINGS: tuple[str, ...] = FINDINGS

DEFAULT_PROBE_TIMEOUT = DEFAULT_TIMEOUT  # probes.model's default for one probe
DEFAULT_RETRY_MAX = 3


def parse_duration(value: object, *, where: str | None = None) -> float:
    """Seconds in ``value``: a number of seconds, or "30s", "5m", "1h", "1h30m", "250ms".

    Negative, NaN and infinite values are refused, as are unitless strings ("30" is
    ambiguous next to "30ms").  ``where`` prefixes the error message (file and key).
    """
    seconds, why = duration_problem(value)
    if seconds is None:
        raise ConfigError(f"{where}: {why}" if where else why)
    return seconds


# --------------------------------------------------------------------------- what the file holds


class Probe(msgspec.Struct, frozen=True, kw_only=True):
    """A probe spec: ``kind`` names the builtin check, ``params`` its validated inputs."""

    name: str
    kind: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    every: float | None = None  # seconds between scheduled runs; None: on demand only
    timeout: float = DEFAULT_PROBE_TIMEOUT
    restart: str | None = None  # the command that restarts what it checks (a ``restart`` response runs it)

    def to_spec(self, cwd: str | None = None, **runtime_params: Any) -> ProbeSpec:
        """The ``probes.model.ProbeSpec`` to run, in worktree ``cwd`` (absolute).

        ``runtime_params`` adds what only the caller knows (a write's ``sha256`` from the
        agent's claim, a build's ``previous_hash`` from the ledger).  Keys are
        lockstep.toml's spellings (``cmd`` for the command kind's ``shell``).
        """
        params = dict(self.params)
        for toml_key, param in _toml_keys(self.kind).items():
            if toml_key in params:
                params[param] = params.pop(toml_key)
        params.update(runtime_params)
        return ProbeSpec(name=self.name, kind=self.kind, params=params, timeout=self.timeout, cwd=cwd)


class RuleTable(Table, kw_only=True):
    """``[[rule]]``: the keys every rule may have; which parameters a response takes is
    checked after decoding (``RESPONSE_PARAMS``)."""

    finding: Text  # a finding phrase ("build produced nothing") or "*" for any
    response: ResponseAction
    probe: Text | None = None  # only findings from this probe (name or builtin kind)
    kind: Text | None = None  # only findings from probes of this kind (http, command, ...)
    target: Text | None = None  # only findings whose target (URL, path, command) matches this glob
    contains: Text | None = None  # only findings whose reason contains this text (case ignored)
    min_failing: Annotated[int, msgspec.Meta(ge=1)] = 1  # distinct probes reporting it together
    within: PositiveSeconds | None = None  # count findings of earlier batches this recent too
    cmd: Text | None = None  # rollback / restart
    path: RelPath | None = None  # touch
    max: Annotated[int, msgspec.Meta(ge=0)] | None = None  # retry bound
    task: Text | None = None  # queue_task
    agent: Text | None = None  # queue_task: who gets the task (default: the finding's agent)
    message: Text | None = None  # notify text, or the instruction sent with any response


class TriggerTable(Table, kw_only=True):
    """``[[trigger]]``: run a ``[[probe]]`` after an agent's shell command matching
    ``command`` (a glob over the whole command line, e.g. ``"npm run build*"``)."""

    command: Text
    probe: Name


class NotifyTable(Table, kw_only=True):
    """``[notify]``: where operator notices (``notify`` responses, "resolved", a restart
    with no command) go besides the ledger and the publications ``top`` shows."""

    desktop: bool = False  # also a desktop notification (notify-send, when installed)
    webhook: Text | None = None  # also POST each as JSON to this http(s) URL


class HttpTable(Table, kw_only=True):
    """``[http]``: what ``http`` and ``consistency`` probes may fetch besides loopback,
    and how (``probes.reach`` states the matching rules)."""

    allow: list[AllowedOrigin] = []  # "https://app.example.com", "https://cdn.example.com/v2"
    ca: RelPath | None = None  # a PEM file of CAs trusted besides the system's (a private CA)
    max_body: Size = DEFAULT_MAX_BODY  # bytes of a response read at most; a longer body is not hashed
    connect_timeout: PositiveSeconds = DEFAULT_CONNECT_TIMEOUT  # to connect and shake hands; the probe's timeout bounds the rest

    def reach(self, repo_root: str | Path) -> Any:
        """The ``probes.reach.Reach`` a probe receives (``ca`` made absolute)."""
        from probes.reach import Reach

        ca = str(Path(repo_root, self.ca)) if self.ca else None
        return Reach(allow=list(self.allow), ca=ca, max_body=self.max_body, connect_timeout=self.connect_timeout)


class Rule(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the findings -> responses table (see ``probes.rules``)."""

    finding: str  # a finding phrase ("build produced nothing") or "*" for any
    response: str  # one of RESPONSE_ACTIONS
    probe: str | None = None  # only findings from this probe (name or builtin kind)
    kind: str | None = None  # only findings from probes of this kind
    target: str | None = None  # a glob the finding's target must match
    contains: str | None = None  # text the finding's reason must contain (case ignored)
    min_failing: int = 1  # distinct probes reporting the finding in one batch (or ``within``)
    within: float | None = None  # seconds: findings of earlier batches this recent count too
    cmd: str | None = None  # rollback / restart
    path: str | None = None  # touch
    max: int | None = None  # retry bound
    task: str | None = None  # queue_task
    agent: str | None = None  # queue_task: who gets the task (default: the finding's agent)
    message: str | None = None  # notify text, or the instruction sent with any response
    origin: str = ""  # where the rule was written; every Response's reason names it


# Parameters each response accepts besides the matching keys; ``message`` is always
# allowed (notify text, or the instruction sent along with the response).
RESPONSE_PARAMS: dict[str, tuple[str, ...]] = {
    "retry": ("max",),
    "rollback": ("cmd",),
    "restart": ("cmd",),
    "touch": ("path",),
    "notify": (),
    "block_agent": (),
    "queue_task": ("task", "agent"),
}
_RESPONSE_REQUIRED: dict[str, tuple[str, ...]] = {"touch": ("path",), "queue_task": ("task",)}
_ALL_RESPONSE_PARAMS = ("cmd", "path", "max", "task", "agent", "message")


class Config(msgspec.Struct, frozen=True, kw_only=True):
    """A whole, validated ``lockstep.toml``."""

    source: str = CONFIG_FILENAME
    coordinator: CoordinatorConfig = CoordinatorConfig()
    verify: VerifyConfig = VerifyConfig()
    land: LandConfig = LandConfig()
    ledger: LedgerConfig = LedgerConfig()
    handoff: HandoffConfig = HandoffConfig()
    checks: tuple[Check, ...] = ()
    suite_detected: bool = False  # checks came from detect_suite, not from the file
    probes: tuple[Probe, ...] = ()
    rules: tuple[Rule, ...] = ()
    notify: NotifyTable = NotifyTable()
    triggers: tuple[TriggerTable, ...] = ()
    http: HttpTable = HttpTable()

    def triggered(self, command: str) -> list[Probe]:
        """The ``[[probe]]``s whose ``[[trigger]]`` matches shell ``command`` (each once)."""
        line = " ".join(command.split())
        names = dict.fromkeys(t.probe for t in self.triggers if fnmatch.fnmatchcase(line, t.command))
        return [probe for name in names if (probe := self.probe(name)) is not None]

    def probe(self, name: str) -> Probe | None:
        """The ``[[probe]]`` called ``name``, if any."""
        for probe in self.probes:
            if probe.name == name:
                return probe
        return None

    def probes_by_name(self) -> dict[str, Probe]:
        return {probe.name: probe for probe in self.probes}

    def scheduled_probes(self) -> tuple[Probe, ...]:
        """Probes with ``every`` set, in file order."""
        return tuple(probe for probe in self.probes if probe.every is not None)

    def scheduled_cycles(self) -> dict[float, tuple[Probe, ...]]:
        """Scheduled probes by ``every``: probes of one period run together, one cycle at
        a time, and the rules judge a cycle's findings together (two endpoints down in
        one cycle is one batch)."""
        cycles: dict[float, list[Probe]] = {}
        for probe in self.scheduled_probes():
            cycles.setdefault(probe.every, []).append(probe)
        return {every: tuple(probes) for every, probes in cycles.items()}


# --------------------------------------------------------------------------- [[probe]] tables


def _params_types() -> dict[str, type]:
    from probes.kinds import (
        kinds,  # the kind modules, imported when a file is first decoded
    )

    return {name: kind.params for name, kind in kinds().items()}


def _toml_fields(params: type) -> list[tuple[str, str, Any, bool]]:
    """(param, TOML key, TOML type, required) of a kind's params Struct, in order."""
    hints = get_type_hints(params, include_extras=True)
    found = []
    for field in msgspec.structs.fields(params):
        hint = hints[field.name]
        spelling: dict[str, Any] = {"type": None, "key": None, "optional": False}
        base = hint
        if getattr(hint, "__metadata__", None) is not None:
            base = hint.__origin__
            for meta in hint.__metadata__:
                if isinstance(meta, msgspec.Meta) and meta.extra and "toml" in meta.extra:
                    if meta.extra["toml"] is None:
                        spelling = None  # type: ignore[assignment]
                        break
                    spelling = meta.extra["toml"]
        if spelling is None:
            continue
        toml_type = spelling["type"] or _without_none(base)
        required = field.required and not spelling["optional"]
        found.append((field.name, spelling["key"] or field.name, toml_type, required))
    return found


def _without_none(hint: Any) -> Any:
    """``X | None`` -> ``X``: TOML has no null, an absent key is the None."""
    args = [a for a in get_args(hint) if a is not type(None) and a is not msgspec.UnsetType]
    if get_args(hint) and len(args) != len(get_args(hint)):
        return args[0] if len(args) == 1 else Union[tuple(args)]
    return hint


@cache
def _toml_keys(kind: str) -> dict[str, str]:
    """TOML key -> param name, where a kind spells a parameter differently in the file."""
    params = _params_types().get(kind)
    if params is None:
        return {}
    return {key: param for param, key, _, _ in _toml_fields(params) if key != param}


@cache
def probe_params() -> dict[str, tuple[str, ...]]:
    """The TOML keys each probe kind takes, besides name, kind, every and timeout."""
    return {kind: tuple(key for _, key, _, _ in _toml_fields(params)) for kind, params in _params_types().items()}


@cache
def probe_table(kind: str, *, named: bool = True, schedulable: bool = True) -> type:
    """The Struct a ``[[probe]]`` table of ``kind`` decodes into: ``name`` (required
    when ``named``), ``every`` (only when ``schedulable``: plan probes run when the plan
    says, never on a timer), ``timeout``, then the kind's parameters as the file writes
    them.  Optional parameters default to UNSET, so the Probe keeps only those given."""
    fields: list[tuple[Any, ...]] = [("name", Name) if named else ("name", Name, msgspec.UNSET)]
    if schedulable:
        fields.append(("every", PositiveSeconds, msgspec.UNSET))
    fields.append(("timeout", Timeout, DEFAULT_PROBE_TIMEOUT))
    if named:
        fields.append(("restart", Text, msgspec.UNSET))
    for _, key, toml_type, required in _toml_fields(_params_types()[kind]):
        fields.append((key, toml_type) if required else (key, toml_type, msgspec.UNSET))
    takes = ", ".join(probe_params()[kind])
    return msgspec.defstruct(
        f"{kind.capitalize()}ProbeTable",
        fields,
        bases=(Table,),
        tag_field="kind",
        tag=kind,
        namespace={"hint": f" (kind {kind!r} takes: {takes})"},
        module=__name__,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
    )


@cache
def probe_tables(*, named: bool = True, schedulable: bool = True) -> Any:
    """The union of every kind's table, told apart by ``kind``."""
    return Union[tuple(probe_table(kind, named=named, schedulable=schedulable) for kind in PROBE_KINDS)]


def probe_from_table(table: Any, where: str, default_name: str | None = None) -> Probe:
    """The ``Probe`` of a decoded ``[[probe]]`` table (``probe_table``)."""
    kind = type(table).__struct_config__.tag
    params = {
        key: getattr(table, key)
        for key in table.__struct_fields__
        if key not in ("name", "every", "timeout", "restart") and getattr(table, key) is not msgspec.UNSET
    }
    problem = _table_problem(kind, params)
    if problem:
        raise ConfigError(f"{where}: {problem}")
    name = table.name if table.name is not msgspec.UNSET else default_name
    every = getattr(table, "every", msgspec.UNSET)
    restart = getattr(table, "restart", msgspec.UNSET)
    return Probe(
        name=name, kind=kind, params=params, every=None if every is msgspec.UNSET else every, timeout=table.timeout,
        restart=None if restart is msgspec.UNSET else restart,
    )


def _table_problem(kind: str, params: dict[str, Any]) -> str | None:
    from probes.kinds import kinds

    check = kinds()[kind].table_problem
    return check(params) if check is not None else None


@cache
def _config_file() -> type:
    """The Struct ``lockstep.toml`` decodes into (built once the kinds are known)."""
    return msgspec.defstruct(
        "ConfigFile",
        [
            ("coordinator", CoordinatorConfig, CoordinatorConfig()),
            ("verify", VerifyConfig, VerifyConfig()),
            ("land", LandConfig, LandConfig()),
            ("ledger", LedgerConfig, LedgerConfig()),
            ("handoff", HandoffConfig, HandoffConfig()),
            # None: no `checks` key, so the suite is detected; {} turns detection off.
            ("checks", Union[dict[str, CheckTable], None], None),
            ("probe", list[probe_tables()], []),
            ("rule", list[RuleTable], []),
            ("notify", NotifyTable, NotifyTable()),
            ("trigger", list[TriggerTable], []),
            ("http", HttpTable, HttpTable()),
        ],
        bases=(Table,),
        namespace={"hint": " ([checks.NAME] for checks, [[probe]], [[rule]] and [[trigger]] for arrays)"},
        module=__name__,
        frozen=True,
        kw_only=True,
        forbid_unknown_fields=True,
    )


def __getattr__(name: str) -> Any:
    # PROBE_PARAMS needs the kinds' params Structs: built on first use, not at import.
    if name == "PROBE_PARAMS":
        return probe_params()
    raise AttributeError(name)


# --------------------------------------------------------------------------- parsing


def load_config(repo_root: str | Path) -> Config:
    """Read ``lockstep.toml`` at ``repo_root``; defaults and a detected suite if absent."""
    root = Path(repo_root)
    path = root / CONFIG_FILENAME
    try:
        raw = read_regular(path, CONFIG_LIMIT)
    except FileNotFoundError:
        return Config(source=str(path), checks=tuple(detect_suite(root)), suite_detected=True)
    except OSError as exc:  # a directory, a FIFO, a device, far too big: it says which
        raise ConfigError(f"{path}: cannot be read: {exc.strerror}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc})") from None
    config = parse_config(text, source=str(path))
    if config.suite_detected:
        return msgspec.structs.replace(config, checks=tuple(detect_suite(root)))
    return config


def parse_config(text: str, source: str = CONFIG_FILENAME) -> Config:
    """Validate the TOML ``text`` of a ``lockstep.toml`` named ``source`` in errors.

    With no ``checks`` key, ``suite_detected`` is True and ``checks`` is empty: the
    caller that knows the repository (``load_config``) fills them from ``detect_suite``.
    """
    file = decode(text, _config_file(), source)
    checks = tuple(_check(name, table, source) for name, table in (file.checks or {}).items())
    probes: list[Probe] = []
    seen: set[str] = set()
    for index, table in enumerate(file.probe, start=1):
        probe = probe_from_table(table, f"{source}: [[probe]] #{index}")
        check_reach(probe, file.http, f"{source}: [[probe]] #{index}")
        if probe.name in seen:
            raise ConfigError(
                f"{source}: [[probe]] #{index} key 'name': {probe.name!r} is already used by an earlier [[probe]]"
            )
        seen.add(probe.name)
        probes.append(probe)
    known_probe_names = seen | {c.name for c in checks} | set(PROBE_KINDS)
    rules = tuple(
        rule_from_table(table, f"{source}: [[rule]] #{index}", known_probe_names)
        for index, table in enumerate(file.rule, start=1)
    )
    webhook = file.notify.webhook
    if webhook is not None and not re.match(r"https?://[^/\s]+", webhook):
        raise ConfigError(f"{source}: [notify] key 'webhook': {webhook!r} is not an http:// or https:// URL")
    for index, trigger in enumerate(file.trigger, start=1):
        if trigger.probe not in seen:
            raise ConfigError(
                f"{source}: [[trigger]] #{index} key 'probe': {trigger.probe!r} names no [[probe]]; "
                f"known: {', '.join(sorted(seen)) or 'none'}"
            )
    note = file.handoff.path
    if note.startswith(("/", "~")) or ".." in note.replace("\\", "/").split("/"):
        raise ConfigError(f"{source}: [handoff] key 'path': {note!r} must be a path inside the worktree (relative, no '..')")
    return Config(
        source=source,
        handoff=file.handoff,
        notify=file.notify,
        triggers=tuple(file.trigger),
        http=file.http,
        coordinator=file.coordinator,
        verify=file.verify,
        land=file.land,
        ledger=file.ledger,
        checks=checks,
        suite_detected=file.checks is None,
        probes=tuple(probes),
        rules=rules,
    )


def check_reach(probe: Probe, http: HttpTable, where: str) -> None:
    """A probe's URLs must be loopback or under ``[http] allow`` (``probes.reach``)."""
    from probes.reach import refusal

    if probe.kind == "http":
        urls = [("url", probe.params["url"])]
    elif probe.kind == "consistency":
        urls = [("sources", s) for s in probe.params.get("sources", ()) if s.startswith(("http://", "https://"))]
    else:
        return
    for key, url in urls:
        why = refusal(url, http.allow)
        if why:
            raise ConfigError(f"{where} key '{key}': {why}")


def _check(name: str, table: CheckTable, source: str) -> Check:
    from probes.schema import name_problem

    why = name_problem(name)
    if why:
        raise ConfigError(f"{source}: [checks.{name}]: {why}")
    return Check(name=name, **msgspec.structs.asdict(table))


def rule_from_table(table: RuleTable, where: str, known_probe_names: set[str] | None = None) -> Rule:
    """One ``[[rule]]``; ``known_probe_names`` (if given) bounds the ``probe`` filter."""
    _check_finding_phrase(table.finding, f"{where} key 'finding'")
    if table.probe is not None and known_probe_names is not None and table.probe not in known_probe_names:
        raise ConfigError(
            f"{where} key 'probe': {table.probe!r} names no [[probe]], check or probe kind; "
            f"known: {', '.join(sorted(known_probe_names))}"
        )
    if table.kind is not None and table.kind not in PROBE_KINDS:
        raise ConfigError(f"{where} key 'kind': {table.kind!r} is not a probe kind; known: {', '.join(PROBE_KINDS)}")
    if table.within is not None and table.min_failing < 2:
        raise ConfigError(f"{where} key 'within': it counts findings across batches, so it needs min_failing = 2 or more")
    allowed = RESPONSE_PARAMS[table.response] + ("message",)
    for key in _ALL_RESPONSE_PARAMS:
        if getattr(table, key) is not None and key not in allowed:
            raise ConfigError(
                f"{where} key '{key}': response {table.response!r} takes no {key!r} (it takes: {', '.join(allowed)})"
            )
    for key in _RESPONSE_REQUIRED.get(table.response, ()):
        if getattr(table, key) is None:
            raise ConfigError(f"{where}: response {table.response!r} needs the key '{key}'")
    values = msgspec.structs.asdict(table)
    if table.response == "retry" and table.max is None:
        values["max"] = DEFAULT_RETRY_MAX
    return Rule(origin=where, **values)


def _check_finding_phrase(phrase: str, where: str) -> None:
    """Refuse a phrase that is almost, but not exactly, a known finding: rules compare
    phrases exactly, so "enpoint failing" would never match.  Phrases far from every
    known one are custom findings and pass."""
    normalized = re.sub(r"\s+", " ", phrase.strip().lower())
    if normalized == "*" or normalized in KNOWN_FINDINGS:
        return
    import difflib  # only for a phrase that is not a known finding

    close = difflib.get_close_matches(normalized, KNOWN_FINDINGS, n=1, cutoff=0.8)
    if close:
        raise ConfigError(
            f"{where}: {phrase!r} is not a known finding; did you mean {close[0]!r}? "
            f"(known findings: {', '.join(KNOWN_FINDINGS)})"
        )
