"""The coordinator's tunables as the core reads them: one flat, validated Struct.

The schema (names, types, ranges, defaults, meanings, flags) is ``probes.settings``:
``Settings`` is generated from its ``[coordinator]`` and ``[verify]`` fields, so a
setting is declared once.  Precedence: ``serve`` flags > ``[coordinator]`` /
``[verify]`` in ``lockstep.toml`` > defaults.  The file is read when ``serve`` starts;
``[checks]`` are read at each run.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from probes.config import Config, load_config
from probes.schema import Table, dec_hook
from probes.settings import MODES, VERIFY_POLICIES, settings
from probes.tomlfile import explain
from protocol.errors import UsageError

__all__ = ["MODES", "VERIFY_POLICIES", "Settings", "load_settings"]


class _SettingsBase(Table):
    max_dead_agents: int = 200  # stale/gone agents kept for `status` (not configurable)

    @property
    def silence_limit(self) -> float:
        """Seconds of silence after which a heartbeating agent is stale."""
        return self.heartbeat * self.liveness  # type: ignore[attr-defined]


Settings = msgspec.defstruct(
    "Settings",
    [(s.name, s.type, s.default) for s in settings()],
    bases=(_SettingsBase,),
    module=__name__,
    frozen=True,
    kw_only=True,
)
Settings.__doc__ = "Every coordinator setting, flat: [coordinator] keys as is, [verify] ones as verify_policy, max_repair_loops."


REMOTE_FSYNC = "power-loss"

# Durations a coordinator cannot keep to, (least, most) in seconds, refused at start
# (declared with each setting: ``probes.settings``): a heartbeat of 5e-324 s had every
# client beat in a busy loop, one of 1e308 s (times the liveness, past the float range)
# never let a silent agent go stale, a one-shot TTL of 5e-324 s ended each command's
# session as it opened (a claim's TTL has the same least), and a lock delay or a git
# timeout of 1e308 s held a path, or waited on git, for ever.
DURATION_BOUNDS: dict[str, tuple[float, float | None]] = {s.name: s.seconds for s in settings() if s.seconds is not None}


def load_settings(repo_root: Path | None, *, remote: bool = False, **overrides: object) -> Settings:
    """Settings from ``lockstep.toml`` (``[coordinator]`` and ``[verify]``), then
    ``overrides`` (flags, already in seconds; ``None`` means "not given").

    ``remote`` (agents on other hosts are served): ``fsync`` defaults to
    ``power-loss`` instead, unless the file or a flag sets it.  A grant then survives
    the coordinator host's power loss, so agents on other machines, which cannot see
    that host go down, never hold a token the restarted coordinator forgot.

    A bad value raises ``UsageError`` (exit 2) naming the setting."""
    config = load_config(repo_root) if repo_root is not None else Config()
    values: dict[str, object] = {}
    for s in settings():
        values[s.name] = getattr(getattr(config, s.table), s.key)
    if remote and overrides.get("fsync") is None and not _names_fsync(repo_root):
        values["fsync"] = REMOTE_FSYNC
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        result = msgspec.convert(values, Settings, dec_hook=dec_hook)
    except msgspec.ValidationError as exc:
        message = explain(str(exc), Settings, values, "invalid coordinator setting", nested=True)
        raise UsageError(message, code="bad_request") from None
    for name, (least, most) in DURATION_BOUNDS.items():
        value = getattr(result, name)
        if value < least or most is not None and value > most:
            span = f"from {least:g} s to {most:g} s" if most is not None else f"at least {least:g} s"
            raise UsageError(f"invalid coordinator setting {name}: {value:g} s is out of bounds ({span})", code="bad_request")
    return result


def durability_source(repo_root: Path | None, *, remote: bool, flag: object) -> str:
    """Why ``fsync`` has the value in force, for ``status``."""
    if flag is not None:
        return "serve --fsync"
    if _names_fsync(repo_root):
        return "lockstep.toml [coordinator] fsync"
    return "the default with remote agents (--curve)" if remote else "the default"


def _names_fsync(repo_root: Path | None) -> bool:
    """``lockstep.toml`` sets ``[coordinator] fsync`` itself (``load_config`` has read
    and checked the file already; this only asks whether the key is there)."""
    import tomllib

    from probes.config import CONFIG_FILENAME

    if repo_root is None:
        return False
    try:
        with open(Path(repo_root) / CONFIG_FILENAME, "rb") as f:
            table = tomllib.load(f).get("coordinator", {})
    except (OSError, tomllib.TOMLDecodeError, RecursionError):  # serve reports the file's errors
        return False
    return isinstance(table, dict) and "fsync" in table
