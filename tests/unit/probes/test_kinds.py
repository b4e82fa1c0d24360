"""Probe kinds: one module each, declared once, found by the catalogue."""

from __future__ import annotations

import importlib
from pathlib import Path

from probes import builtin
from probes.kinds import Kind, kinds
from probes.kinds.common import Params
from probes.model import KINDS

KINDS_DIR = Path(__file__).resolve().parents[3] / "probes" / "kinds"


def test_the_catalogue_is_the_kind_modules_in_wire_order():
    assert tuple(kinds()) == KINDS
    modules = {p.stem for p in KINDS_DIR.glob("*.py")} - {"__init__", "common"}
    for name in modules:
        kind = importlib.import_module(f"probes.kinds.{name}").KIND
        assert isinstance(kind, Kind) and kinds()[kind.name] is kind


def test_each_kind_declares_its_params_checks_run_and_target_in_its_own_module():
    for name, kind in kinds().items():
        module = f"probes.kinds.{name}"
        assert issubclass(kind.params, Params) and kind.params.__struct_config__.forbid_unknown_fields
        for part in (kind.params, kind.check, kind.run, kind.target):
            assert part.__module__ == module, (name, part)


def test_only_command_runs_on_the_loop_every_other_kind_in_a_worker():
    assert [name for name, kind in kinds().items() if kind.on_loop] == ["command"]
    assert set(builtin.PYTHON_PROBES) == set(KINDS) - {"command"}
    assert builtin.PARAMS_TYPES == {name: kind.params for name, kind in kinds().items()}
