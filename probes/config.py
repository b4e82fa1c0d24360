"""The project's configuration: ``lockstep.toml`` at the repository root.

Theory
------
The file is the user's contract with Lockstep, so it is read strictly: every table and
key is known, every value is checked for type and range when the file is loaded, and
the first problem stops loading with a ``ConfigError`` whose message names the file, the
key and what is wrong.  A typo (``respone = "retry"``) must fail loudly, never fall
back to a default.  Nothing is read lazily later: once ``parse_config`` returns, every
value in the ``Config`` is valid, and durations are plain float seconds.

Tables (all optional; docs/config.md documents each key, type and default):

``[coordinator]``
    ``mode``, ``heartbeat``, ``liveness``, ``lock_delay``, ``auto_claim``.
``[verify]``
    ``policy`` and ``max_repair_loops`` of the verify loop.
``[checks.NAME]``
    the project's verify suite, one table per check, run in file order.  With no
    ``checks`` key at all the suite is auto-detected (``detect_suite``); an explicit
    empty ``[checks]`` table means "no checks" and turns detection off.
``[[probe]]``
    named probes (``kind`` plus that kind's parameters), scheduled when ``every`` is set.
``[[rule]]``
    findings -> responses; they precede ``probes.rules.DEFAULT_RULES``.

This module is pure apart from ``load_config``/``detect_suite`` reading files; it starts
no process and reads no clock.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
import tomllib
import urllib.parse
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec

from probes.model import DEFAULT_TIMEOUT, FINDINGS, KINDS, ProbeSpec
from probes.settings import MODES, VERIFY_POLICIES, CoordinatorConfig, VerifyConfig
from protocol.errors import UsageError

CONFIG_FILENAME = "lockstep.toml"

PROBE_KINDS = KINDS  # write, build, command, http, processes, handoff (probes.model)
RESPONSE_ACTIONS = (
    "retry",
    "rollback",
    "restart",
    "touch",
    "notify",
    "block_agent",
    "queue_task",
)

# Finding phrases reported by other parts than the builtin probes (which report
# probes.model.FINDINGS): the deploy verifier and the evaluation of a goal.
DEPLOY_HASH_MISMATCH = "deploy hash mismatch"
EVALUATION_FAILED = "evaluation failed"
KNOWN_FINDINGS: tuple[str, ...] = (*FINDINGS, DEPLOY_HASH_MISMATCH, EVALUATION_FAILED)

DEFAULT_CHECK_TIMEOUT = 600.0  # 10m: a whole test suite may be slow; a hung one is not
DEFAULT_PROBE_TIMEOUT = DEFAULT_TIMEOUT  # probes.model's default for one probe
DEFAULT_RETRY_MAX = 3

# Names of checks and probes appear in ledger rows, CLI output and rule filters: keep
# them to one shell-safe word.
_NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


class ConfigError(UsageError):
    """The user's configuration (``lockstep.toml``, ``PLAN.toml``) is invalid.

    A ``UsageError`` (exit 2; code ``bad_request`` in ``--json`` output): our user's
    input is at fault, not Lockstep and not a remote peer, and the message says which
    file, which key and what is wrong.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message, code="bad_request")

    def __repr__(self) -> str:
        return f"ConfigError({self.message!r})"


# --------------------------------------------------------------------------- durations

# One component is a number and a unit; components appear largest unit first, at most
# once each ("1h30m", not "30m1h" or "1m1m"), so every accepted string reads one way.
_DURATION_UNITS = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}
_DURATION_ORDER = ("h", "m", "s", "ms")
_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_DURATION_SHAPE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|h|m|s))+")


def parse_duration(value: object, *, where: str | None = None) -> float:
    """Seconds in ``value``: a number of seconds, or "30s", "5m", "1h", "1h30m", "250ms".

    Negative, NaN and infinite values are refused, as are unitless strings ("30" is
    ambiguous next to "30ms").  ``where`` prefixes the error message (file and key).
    """
    prefix = f"{where}: " if where else ""
    expected = "expected a number of seconds or a string like '30s', '5m', '1h30m', '250ms'"
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ConfigError(f"{prefix}{value!r} is not a duration: {expected}")
    if isinstance(value, (int, float)):
        seconds = float(value)
        if not math.isfinite(seconds) or seconds < 0:
            raise ConfigError(f"{prefix}{value!r} is not a duration: it must be finite and >= 0")
        return seconds
    text = value.strip()
    if not _DURATION_SHAPE.fullmatch(text):
        raise ConfigError(f"{prefix}{value!r} is not a duration: {expected}")
    seconds = 0.0
    last_rank = -1
    for number, unit in _DURATION_PART.findall(text):
        rank = _DURATION_ORDER.index(unit)
        if rank <= last_rank:
            raise ConfigError(
                f"{prefix}{value!r} is not a duration: units must appear largest first, "
                "each at most once (like '1h30m')"
            )
        last_rank = rank
        seconds += float(number) * _DURATION_UNITS[unit]
    return seconds


# --------------------------------------------------------------------------- schema


class Check(msgspec.Struct, frozen=True, kw_only=True):
    """One check of the verify suite: a shell command that passes when it exits 0."""

    name: str
    cmd: str
    timeout: float = DEFAULT_CHECK_TIMEOUT
    autofix: bool = False  # it changes files: run after the read-only checks, serially
    cwd: str | None = None  # repo-relative; None is the repository root

    def to_spec(self, root: str | Path) -> ProbeSpec:
        """The ``command`` probe that runs this check in worktree ``root`` (absolute)."""
        where = Path(root) if self.cwd is None else Path(root, self.cwd)
        return ProbeSpec(
            name=self.name,
            kind="command",
            params={"shell": self.cmd},
            timeout=self.timeout,
            autofix=self.autofix,
            cwd=str(where),
        )


class Probe(msgspec.Struct, frozen=True, kw_only=True):
    """A probe spec: ``kind`` names the builtin check, ``params`` its validated inputs."""

    name: str
    kind: str
    params: dict[str, Any] = msgspec.field(default_factory=dict)
    every: float | None = None  # seconds between scheduled runs; None: on demand only
    timeout: float = DEFAULT_PROBE_TIMEOUT

    def to_spec(self, cwd: str | None = None, **runtime_params: Any) -> ProbeSpec:
        """The ``probes.model.ProbeSpec`` to run, in worktree ``cwd`` (absolute).

        ``runtime_params`` adds what only the caller knows (a write's ``sha256`` from the
        agent's claim, a build's ``previous_hash`` from the ledger).  ``cmd`` is
        lockstep.toml's spelling of the command kind's ``shell``.
        """
        params = dict(self.params)
        if "cmd" in params:
            params["shell"] = params.pop("cmd")
        params.update(runtime_params)
        return ProbeSpec(name=self.name, kind=self.kind, params=params, timeout=self.timeout, cwd=cwd)


class Rule(msgspec.Struct, frozen=True, kw_only=True):
    """One row of the findings -> responses table (see ``probes.rules``)."""

    finding: str  # a finding phrase ("build produced nothing") or "*" for any
    response: str  # one of RESPONSE_ACTIONS
    probe: str | None = None  # only findings from this probe (name or builtin kind)
    min_failing: int = 1  # distinct probes reporting the finding in one batch
    cmd: str | None = None  # rollback / restart
    path: str | None = None  # touch
    max: int | None = None  # retry bound
    task: str | None = None  # queue_task
    agent: str | None = None  # queue_task: who gets the task (default: the finding's agent)
    message: str | None = None  # notify text, or the instruction sent with any response
    origin: str = ""  # where the rule was written; every Response's reason names it


class Config(msgspec.Struct, frozen=True, kw_only=True):
    """A whole, validated ``lockstep.toml``."""

    source: str = CONFIG_FILENAME
    coordinator: CoordinatorConfig = CoordinatorConfig()
    verify: VerifyConfig = VerifyConfig()
    checks: tuple[Check, ...] = ()
    suite_detected: bool = False  # checks came from detect_suite, not from the file
    probes: tuple[Probe, ...] = ()
    rules: tuple[Rule, ...] = ()

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


# Parameters each probe kind accepts in lockstep.toml: name -> (type, required).  They are
# probes.builtin's params (its docstring says what each does) minus the ones only the
# caller knows at run time (write.sha256 may be given or come from the agent's claim;
# build.previous_hash and handoff.repo_root come from the ledger and the worktree), and
# with the command kind's ``shell`` spelled ``cmd`` as in [checks.NAME].  Checked again
# at load time here so that the error names the file and the key.
PROBE_PARAMS: dict[str, dict[str, tuple[str, bool]]] = {
    "write": {"path": ("relpath", True), "sha256": ("sha256", False)},
    "build": {"dir": ("relpath", True), "pattern": ("glob", False)},
    "command": {
        "cmd": ("str", False),  # exactly one of cmd / argv
        "argv": ("argv", False),
        "expect_exit": ("int", False),
        "creates": ("relpath", False),
        "env": ("env", False),
    },
    "http": {
        "url": ("loopback_url", True),
        "status": ("http_status", False),
        "contains": ("str", False),
        "json_path": ("str", False),
        "equals": ("any", False),
        "at_least": ("number", False),
    },
    "processes": {
        "match": ("regex", True),
        "count": ("natural", False),
        "names": ("regex_list", False),
        "exact": ("bool", False),
    },
    "handoff": {"path": ("relpath", True), "threshold": ("percent", False)},
}

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
_RULE_MATCH_KEYS = ("finding", "probe", "min_failing", "response")
_ALL_RESPONSE_PARAMS = ("cmd", "path", "max", "task", "agent", "message")

_REQUIRED = object()


class _Table:
    """Reads one TOML table; remembers the keys it was asked for so leftovers are errors."""

    def __init__(self, data: object, where: str) -> None:
        if not isinstance(data, dict):
            raise ConfigError(f"{where}: expected a table, got {_describe(data)}")
        self.data: dict[str, Any] = data
        self.where = where
        self.read: set[str] = set()

    def _fail(self, key: str, problem: str) -> ConfigError:
        return ConfigError(f"{self.where} key '{key}': {problem}")

    def _get(self, key: str, default: Any) -> Any:
        self.read.add(key)
        if key in self.data:
            return self.data[key]
        if default is _REQUIRED:
            close = difflib.get_close_matches(key, sorted(set(self.data) - self.read), n=1)
            typo = f" (is '{close[0]}' a typo for it?)" if close else ""
            raise ConfigError(f"{self.where}: required key '{key}' is missing{typo}")
        return default

    def has(self, key: str) -> bool:
        return key in self.data

    def string(self, key: str, default: Any = _REQUIRED, *, choices: Iterable[str] = ()) -> Any:
        value = self._get(key, default)
        if value is default and key not in self.data:
            return value
        if not isinstance(value, str):
            raise self._fail(key, f"expected a string, got {_describe(value)}")
        if not value.strip():
            raise self._fail(key, "must not be empty")
        choices = tuple(choices)
        if choices and value not in choices:
            raise self._fail(key, f"{value!r} is not one of {', '.join(choices)}")
        return value

    def name(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.string(key, default)
        if key in self.data:
            _check_name(value, f"{self.where} key '{key}'")
        return value

    def integer(self, key: str, default: Any = _REQUIRED, *, minimum: int | None = None,
                maximum: int | None = None) -> Any:
        value = self._get(key, default)
        if value is default and key not in self.data:
            return value
        if isinstance(value, bool) or not isinstance(value, int):
            raise self._fail(key, f"expected an integer, got {_describe(value)}")
        if minimum is not None and value < minimum:
            raise self._fail(key, f"{value} is less than the minimum {minimum}")
        if maximum is not None and value > maximum:
            raise self._fail(key, f"{value} is more than the maximum {maximum}")
        return value

    def boolean(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self._get(key, default)
        if value is default and key not in self.data:
            return value
        if not isinstance(value, bool):
            raise self._fail(key, f"expected true or false, got {_describe(value)}")
        return value

    def duration(self, key: str, default: Any = _REQUIRED, *, positive: bool = True) -> Any:
        value = self._get(key, default)
        if value is default and key not in self.data:
            return value
        seconds = parse_duration(value, where=f"{self.where} key '{key}'")
        if positive and seconds <= 0:
            raise self._fail(key, f"{value!r} must be longer than zero")
        return seconds

    def relpath(self, key: str, default: Any = _REQUIRED) -> Any:
        value = self.string(key, default)
        if isinstance(value, str):
            problem = _relpath_problem(value)
            if problem:
                raise self._fail(key, problem)
        return value

    def finish(self, *, hint: str = "") -> None:
        """Refuse keys nobody asked for: a typo must not pass silently."""
        unknown = sorted(set(self.data) - self.read)
        if not unknown:
            return
        key = unknown[0]
        close = difflib.get_close_matches(key, sorted(self.read), n=1)
        suggestion = f" (did you mean '{close[0]}'?)" if close else ""
        known = ", ".join(sorted(self.read))
        raise ConfigError(
            f"{self.where}: unknown key '{key}'{suggestion}; known keys: {known}{hint}"
        )


def _describe(value: object) -> str:
    names = {dict: "a table", list: "an array", str: "a string", bool: "a boolean",
             int: "an integer", float: "a float"}
    return f"{names.get(type(value), type(value).__name__)} ({value!r})"


def _check_name(value: str, where: str) -> None:
    if not _NAME_RE.fullmatch(value):
        raise ConfigError(
            f"{where}: {value!r} is not a valid name: use letters, digits, '_', '.', '-' "
            "(at most 64 characters, starting with a letter or digit)"
        )


def _relpath_problem(value: str) -> str | None:
    """Why ``value`` is not a repo-relative path, or None when it is one."""
    if "\\" in value or "\x00" in value:
        return f"{value!r} must be a '/'-separated path"
    path = PurePosixPath(value)
    if path.is_absolute():
        return f"{value!r} must be relative to the repository root, not absolute"
    if ".." in path.parts:
        return f"{value!r} must not contain '..' (it would leave the repository)"
    return None


# --------------------------------------------------------------------------- parsing


def load_config(repo_root: str | Path) -> Config:
    """Read ``lockstep.toml`` at ``repo_root``; defaults and a detected suite if absent."""
    root = Path(repo_root)
    path = root / CONFIG_FILENAME
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return Config(source=str(path), checks=tuple(detect_suite(root)), suite_detected=True)
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
    try:
        document = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: invalid TOML: {exc}") from None
    top = _Table(document, source)
    coordinator = _parse_coordinator(top._get("coordinator", {}), source)
    verify = _parse_verify(top._get("verify", {}), source)
    has_checks = top.has("checks")
    checks = _parse_checks(top._get("checks", {}), source)
    probes = _parse_probes(top._get("probe", []), source)
    known_probe_names = {p.name for p in probes} | {c.name for c in checks} | set(PROBE_KINDS)
    rules = _parse_rules(top._get("rule", []), source, known_probe_names)
    top.finish(hint=" ([checks.NAME] for checks, [[probe]] and [[rule]] for arrays)")
    return Config(
        source=source,
        coordinator=coordinator,
        verify=verify,
        checks=checks,
        suite_detected=not has_checks,
        probes=probes,
        rules=rules,
    )


def _parse_coordinator(data: object, source: str) -> CoordinatorConfig:
    table = _Table(data, f"{source}: [coordinator]")
    default = CoordinatorConfig()
    result = CoordinatorConfig(
        mode=table.string("mode", default.mode, choices=MODES),
        heartbeat=table.duration("heartbeat", default.heartbeat),
        liveness=table.integer("liveness", default.liveness, minimum=1),
        lock_delay=table.duration("lock_delay", default.lock_delay, positive=False),
        auto_claim=table.boolean("auto_claim", default.auto_claim),
        oneshot_ttl=table.duration("oneshot_ttl", default.oneshot_ttl),
    )
    table.finish()
    return result


def _parse_verify(data: object, source: str) -> VerifyConfig:
    table = _Table(data, f"{source}: [verify]")
    default = VerifyConfig()
    result = VerifyConfig(
        policy=table.string("policy", default.policy, choices=VERIFY_POLICIES),
        max_repair_loops=table.integer("max_repair_loops", default.max_repair_loops, minimum=0),
    )
    table.finish()
    return result


def _parse_checks(data: object, source: str) -> tuple[Check, ...]:
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: key 'checks' must be tables [checks.NAME], got {_describe(data)}"
        )
    checks = []
    # tomllib keeps document order, and so does the suite: the user orders their checks.
    for name, body in data.items():
        where = f"{source}: [checks.{name}]"
        _check_name(name, where)
        table = _Table(body, where)
        checks.append(
            Check(
                name=name,
                cmd=table.string("cmd"),
                timeout=table.duration("timeout", DEFAULT_CHECK_TIMEOUT),
                autofix=table.boolean("autofix", False),
                cwd=table.relpath("cwd", None),
            )
        )
        table.finish()
    return tuple(checks)


def _parse_probes(data: object, source: str) -> tuple[Probe, ...]:
    if not isinstance(data, list):
        raise ConfigError(f"{source}: 'probe' must be an array of tables [[probe]]")
    probes: list[Probe] = []
    seen: set[str] = set()
    for index, body in enumerate(data, start=1):
        probe = parse_probe_table(body, f"{source}: [[probe]] #{index}")
        if probe.name in seen:
            raise ConfigError(
                f"{source}: [[probe]] #{index} key 'name': {probe.name!r} is already used "
                "by an earlier [[probe]]"
            )
        seen.add(probe.name)
        probes.append(probe)
    return tuple(probes)


def parse_probe_table(
    data: object,
    where: str,
    *,
    default_name: str | None = None,
    schedulable: bool = True,
) -> Probe:
    """One probe spec from a TOML table (``[[probe]]`` here, inline specs in PLAN.toml).

    ``default_name`` names a probe whose table has no ``name``; without it the name is
    required.  ``schedulable=False`` refuses ``every`` (plan probes run when the plan
    says, never on a timer).
    """
    table = _Table(data, where)
    name = table.name("name", _REQUIRED if default_name is None else default_name)
    kind = table.string("kind", choices=PROBE_KINDS)
    every = table.duration("every", None) if schedulable else None
    timeout = table.duration("timeout", DEFAULT_PROBE_TIMEOUT)
    params: dict[str, Any] = {}
    for param, (kind_of_value, required) in PROBE_PARAMS[kind].items():
        value = _probe_param(table, param, kind_of_value, required)
        if value is not None:
            params[param] = value
    if kind == "command" and ("cmd" in params) == ("argv" in params):
        raise ConfigError(f"{where}: a command probe needs exactly one of 'cmd' (a string) or 'argv' (a list)")
    table.finish(hint=f" (kind {kind!r} takes: {', '.join(PROBE_PARAMS[kind])})")
    return Probe(name=name, kind=kind, params=params, every=every, timeout=timeout)


def _probe_param(table: _Table, key: str, kind_of_value: str, required: bool) -> Any:
    default = _REQUIRED if required else None
    if kind_of_value == "str":
        return table.string(key, default)
    if kind_of_value == "relpath":
        return table.relpath(key, default)
    if kind_of_value == "bool":
        return table.boolean(key, default)
    if kind_of_value == "int":
        return table.integer(key, default)
    if kind_of_value == "natural":
        return table.integer(key, default, minimum=0)
    if kind_of_value == "percent":
        return table.integer(key, default, minimum=0, maximum=100)
    if kind_of_value == "http_status":
        return table.integer(key, default, minimum=100, maximum=599)
    if key not in table.data:
        return table._get(key, default)
    value = table._get(key, default)
    if kind_of_value == "any":
        return value
    if kind_of_value == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise table._fail(key, f"expected a number, got {_describe(value)}")
        return value
    if kind_of_value == "sha256":
        if not isinstance(value, str) or not re.fullmatch(r"[0-9a-fA-F]{64}", value):
            raise table._fail(key, f"expected 64 hex digits, got {_describe(value)}")
        return value
    if kind_of_value == "glob":
        value = table.string(key, default)
        if value.startswith("/"):
            raise table._fail(key, f"{value!r} must be a relative glob such as '*.whl'")
        return value
    if kind_of_value == "regex":
        value = table.string(key, default)
        _check_regex(table, key, value)
        return value
    if kind_of_value in ("argv", "regex_list"):
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
            raise table._fail(key, f"expected a non-empty array of strings, got {_describe(value)}")
        if kind_of_value == "regex_list":
            for pattern in value:
                _check_regex(table, key, pattern)
        return value
    if kind_of_value == "env":
        if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
            raise table._fail(key, f"expected a table of strings (NAME = \"value\"), got {_describe(value)}")
        return dict(value)
    if kind_of_value == "loopback_url":
        value = table.string(key, default)
        problem = _loopback_url_problem(value)
        if problem:
            raise table._fail(key, problem)
        return value
    raise AssertionError(f"unknown parameter type {kind_of_value!r}")  # a bug in PROBE_PARAMS


def _check_regex(table: _Table, key: str, pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise table._fail(key, f"{pattern!r} is not a valid regular expression ({exc})") from None


def _loopback_url_problem(url: str) -> str | None:
    """Why ``url`` may not be probed (http probes reach loopback only), or None."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 -- raises ValueError on a malformed port
    except ValueError as exc:
        return f"{url!r} is not a valid URL ({exc})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http:// or https:// URL with a host"
    host = parts.hostname
    if host == "localhost" or host.endswith(".localhost"):
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass
    return f"{url!r} is not on localhost or a loopback address (http probes stay local)"


def _parse_rules(data: object, source: str, known_probe_names: set[str]) -> tuple[Rule, ...]:
    if not isinstance(data, list):
        raise ConfigError(f"{source}: 'rule' must be an array of tables [[rule]]")
    return tuple(
        parse_rule_table(body, f"{source}: [[rule]] #{index}", known_probe_names)
        for index, body in enumerate(data, start=1)
    )


def parse_rule_table(data: object, where: str, known_probe_names: set[str] | None = None) -> Rule:
    """One ``[[rule]]``; ``known_probe_names`` (if given) bounds the ``probe`` filter."""
    table = _Table(data, where)
    finding = table.string("finding")
    _check_finding_phrase(finding, f"{where} key 'finding'")
    response = table.string("response", choices=RESPONSE_ACTIONS)
    probe = table.string("probe", None)
    if probe is not None and known_probe_names is not None and probe not in known_probe_names:
        raise ConfigError(
            f"{where} key 'probe': {probe!r} names no [[probe]], check or probe kind; "
            f"known: {', '.join(sorted(known_probe_names))}"
        )
    min_failing = table.integer("min_failing", 1, minimum=1)
    allowed = RESPONSE_PARAMS[response] + ("message",)
    for key in _ALL_RESPONSE_PARAMS:
        if key in table.data and key not in allowed:
            raise ConfigError(
                f"{where} key '{key}': response {response!r} takes no {key!r} "
                f"(it takes: {', '.join(allowed)})"
            )
    for key in _RESPONSE_REQUIRED.get(response, ()):
        if key not in table.data:
            raise ConfigError(f"{where}: response {response!r} needs the key '{key}'")
    params: dict[str, Any] = {
        "cmd": table.string("cmd", None) if "cmd" in allowed else None,
        "path": table.relpath("path", None) if "path" in allowed else None,
        "max": table.integer("max", DEFAULT_RETRY_MAX, minimum=0) if "max" in allowed else None,
        "task": table.string("task", None) if "task" in allowed else None,
        "agent": table.string("agent", None) if "agent" in allowed else None,
        "message": table.string("message", None),
    }
    table.finish()
    return Rule(
        finding=finding,
        response=response,
        probe=probe,
        min_failing=min_failing,
        origin=where,
        **params,
    )


def _check_finding_phrase(phrase: str, where: str) -> None:
    """Refuse a phrase that is almost, but not exactly, a known finding: rules compare
    phrases exactly, so "enpoint failing" would never match.  Phrases far from every
    known one are custom findings and pass."""
    normalized = re.sub(r"\s+", " ", phrase.strip().lower())
    if normalized == "*" or normalized in KNOWN_FINDINGS:
        return
    close = difflib.get_close_matches(normalized, KNOWN_FINDINGS, n=1, cutoff=0.8)
    if close:
        raise ConfigError(
            f"{where}: {phrase!r} is not a known finding; did you mean {close[0]!r}? "
            f"(known findings: {', '.join(KNOWN_FINDINGS)})"
        )


# --------------------------------------------------------------------------- detection

# package.json scripts that make a verify suite, in the order they run (cheap first is
# the users' habit: "typecheck" catches most before "test" spends minutes).
NPM_SCRIPTS = ("typecheck", "test", "lint")


def detect_suite(repo_root: str | Path) -> list[Check]:
    """A conservative verify suite from the project's own manifests.

    Only what the project already declares, in a fixed order: ``package.json`` scripts
    named typecheck, test, lint (those present, as ``npm run NAME``); then ``Cargo.toml``
    (``cargo check``, ``cargo test``); then ``pyproject.toml`` (``python -m pytest -x -q``).
    A ``package.json`` that is not a JSON object with a ``scripts`` object yields nothing:
    guessing at a broken manifest would run commands the project never declared.
    """
    root = Path(repo_root)
    checks: list[Check] = []
    package = root / "package.json"
    if package.is_file():
        for script in _npm_scripts(package):
            checks.append(Check(name=f"npm-{script}", cmd=f"npm run {script}"))
    if (root / "Cargo.toml").is_file():
        checks.append(Check(name="cargo-check", cmd="cargo check"))
        checks.append(Check(name="cargo-test", cmd="cargo test"))
    if (root / "pyproject.toml").is_file():
        checks.append(Check(name="pytest", cmd="python -m pytest -x -q"))
    return checks


def _npm_scripts(package: Path) -> list[str]:
    try:
        manifest = json.loads(package.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    scripts = manifest.get("scripts") if isinstance(manifest, dict) else None
    if not isinstance(scripts, dict):
        return []
    return [name for name in NPM_SCRIPTS if isinstance(scripts.get(name), str) and scripts[name].strip()]
