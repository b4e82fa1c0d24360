"""The coordinator's tunables, their defaults, and where they come from.

Precedence: ``serve`` flags > ``[coordinator]`` / ``[verify]`` in ``lockstep.toml`` >
defaults.  The file is read when ``serve`` starts; ``[checks]`` are read at each run.
"""

from __future__ import annotations

from pathlib import Path

import msgspec

from probes.config import MODES, VERIFY_POLICIES, Config, load_config
from protocol.errors import PeerError


class Settings(msgspec.Struct, frozen=True, kw_only=True):
    mode: str = "parallel-strict"
    heartbeat: float = 1.0  # seconds between an agent's heartbeats
    liveness: int = 3  # heartbeats missed before the agent is stale
    lock_delay: float = 10.0  # how long a possibly-alive stale holder's paths stay held
    auto_claim: bool = True  # an allowed intent on an unclaimed path claims it
    oneshot_ttl: float = 900.0  # life of a session opened by a one-shot CLI call
    max_dead_agents: int = 200  # stale/gone agents kept for `status`
    verify_policy: str = "before-final-answer"  # or "after-each-edit-batch", "off"
    max_repair_loops: int = 3  # failing verify rounds per agent turn before it stops re-running

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise PeerError("bad_request", f"mode must be one of {', '.join(MODES)}, not {self.mode!r}")
        if not self.heartbeat > 0:
            raise PeerError("bad_request", f"heartbeat must be a positive number of seconds, not {self.heartbeat}")
        if self.liveness < 1:
            raise PeerError("bad_request", f"liveness must be at least 1, not {self.liveness}")
        if self.lock_delay < 0:
            raise PeerError("bad_request", f"lock_delay must be >= 0 seconds, not {self.lock_delay}")
        if self.verify_policy not in VERIFY_POLICIES:
            raise PeerError("bad_request", f"verify policy must be one of {', '.join(VERIFY_POLICIES)}, not {self.verify_policy!r}")
        if self.max_repair_loops < 0:
            raise PeerError("bad_request", f"max_repair_loops must be >= 0, not {self.max_repair_loops}")
        if not self.oneshot_ttl > 0:
            raise PeerError("bad_request", f"oneshot_ttl must be positive, not {self.oneshot_ttl}")

    @property
    def silence_limit(self) -> float:
        """Seconds of silence after which a heartbeating agent is stale."""
        return self.heartbeat * self.liveness


def load_settings(repo_root: Path | None, **overrides: object) -> Settings:
    """Settings from ``lockstep.toml`` (``[coordinator]`` and ``[verify]``, validated
    by probes.config), then ``overrides`` (flags; ``None`` means "not given")."""
    config = load_config(repo_root) if repo_root is not None else Config()
    values: dict[str, object] = {
        **msgspec.structs.asdict(config.coordinator),
        "verify_policy": config.verify.policy,
        "max_repair_loops": config.verify.max_repair_loops,
    }
    values.update({k: v for k, v in overrides.items() if v is not None})
    try:
        return msgspec.convert(values, Settings)
    except msgspec.ValidationError as exc:
        raise PeerError("bad_request", f"invalid coordinator setting: {exc}") from None
