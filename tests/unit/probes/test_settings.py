"""The coordinator settings are declared once: flags, lockstep.toml, defaults and docs agree."""

from __future__ import annotations

from pathlib import Path

import click
import msgspec
import pytest

from probes.settings import (
    CoordinatorConfig,
    HandoffConfig,
    LandConfig,
    LedgerConfig,
    VerifyConfig,
    config_table,
    settings,
    settings_table,
)
from protocol.errors import UsageError

ROOT = Path(__file__).resolve().parents[3]


def test_the_readme_table_is_the_schema():
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Configuration and defaults", 1)[1].split("\n## ", 1)[0]
    assert settings_table() in section, "regenerate the README table: probes.settings.settings_table()"


@pytest.mark.parametrize("table", ["coordinator", "verify", "land", "ledger", "handoff"])
def test_the_config_docs_tables_are_the_schema(table):
    docs = (ROOT / "docs" / "config.md").read_text()
    section = docs.split(f"## `[{table}]`", 1)[1].split("\n## ", 1)[0]
    assert config_table(table) in section, f"regenerate with probes.settings.config_table({table!r})"


def test_every_setting_is_documented_and_defaults_come_from_the_structs():
    found = {(s.table, s.key): s for s in settings()}
    assert set(found) == {("coordinator", k) for k in CoordinatorConfig.__struct_fields__} | {
        ("verify", k) for k in VerifyConfig.__struct_fields__
    } | {("land", k) for k in LandConfig.__struct_fields__} | {("ledger", k) for k in LedgerConfig.__struct_fields__} | {
        ("handoff", k) for k in HandoffConfig.__struct_fields__
    }
    assert all(s.meaning for s in found.values())
    assert found["coordinator", "heartbeat"].default == CoordinatorConfig().heartbeat
    assert found["verify", "policy"].default == VerifyConfig().policy
    assert found["land", "required"].default is LandConfig().required is False
    assert found["land", "required"].name == "land_required"
    assert found["ledger", "keep"].default_text == "30d" and found["ledger", "max_size"].default_text == "1GB"
    assert found["handoff", "required"].name == "handoff_required" and found["handoff", "agents"].default_text == "[]"


def test_serve_flags_are_generated_from_the_schema():
    from agents.cli.serve import serve

    options = {opt for param in serve.params if isinstance(param, click.Option) for opt in param.opts}
    flags = {s.flag for s in settings() if s.flag}
    assert flags <= options
    assert flags == {"--mode", "--heartbeat", "--liveness", "--lock-delay", "--no-auto-claim", "--oneshot-ttl", "--fresh-base", "--integration-branch", "--fsync"}


def test_coordinator_settings_are_the_schema_fields_flat():
    from coordinator.settings import Settings, load_settings

    names = {s.name for s in settings()}
    assert names <= set(Settings.__struct_fields__)
    defaults = Settings()
    assert defaults.mode == "parallel-strict" and defaults.heartbeat == 1.0 and defaults.verify_policy == "before-final-answer"
    assert load_settings(None, heartbeat=0.2, liveness=5).silence_limit == pytest.approx(1.0)
    assert type(load_settings(None, lock_delay=2).lock_delay) is float


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [({"liveness": 0}, "liveness"), ({"mode": "yolo"}, "mode"), ({"heartbeat": 0.0}, "heartbeat"),
     ({"lock_delay": -1.0}, "lock_delay")],
)
def test_a_bad_flag_value_is_a_usage_error_naming_the_setting(overrides, fragment):
    from coordinator.settings import load_settings

    with pytest.raises(UsageError) as info:
        load_settings(None, **overrides)
    assert fragment in info.value.message
    assert not isinstance(info.value, msgspec.ValidationError)


def test_serving_remote_agents_makes_power_loss_durability_the_default(tmp_path):
    from coordinator.settings import durability_source, load_settings

    assert load_settings(tmp_path).fsync == "process-crash"
    assert load_settings(tmp_path, remote=True).fsync == "power-loss"
    assert durability_source(tmp_path, remote=True, flag=None) == "the default with remote agents (--curve)"
    assert load_settings(tmp_path, remote=True, fsync="process-crash").fsync == "process-crash"  # the flag wins
    assert durability_source(tmp_path, remote=True, flag="process-crash") == "serve --fsync"
    (tmp_path / "lockstep.toml").write_text('[coordinator]\nfsync = "process-crash"\n')
    assert load_settings(tmp_path, remote=True).fsync == "process-crash"  # and so does the file
    assert durability_source(tmp_path, remote=True, flag=None) == "lockstep.toml [coordinator] fsync"


@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [({"heartbeat": 5e-324}, "heartbeat: 4.94066e-324 s is out of bounds (from 0.01 s to 86400 s)"),
     ({"heartbeat": 1e308}, "heartbeat: 1e+308 s is out of bounds (from 0.01 s to 86400 s)"),
     ({"oneshot_ttl": 1e-320}, "oneshot_ttl: 9.99989e-321 s is out of bounds (from 0.01 s to 86400 s)")],
)
def test_a_duration_the_coordinator_cannot_keep_to_is_refused_at_start(overrides, fragment):
    # a heartbeat of 5e-324 s set every client beating in a busy loop; one of 1e308 s,
    # times the liveness, was infinite; a one-shot TTL of 1e-320 s ended sessions as they opened
    from coordinator.settings import load_settings

    with pytest.raises(UsageError) as info:
        load_settings(None, **overrides)
    assert info.value.code == "bad_request" and fragment in info.value.message
    assert load_settings(None, heartbeat=0.01, oneshot_ttl=0.01).heartbeat == 0.01
