"""Docs are tested: every CLI command has help text and a README entry."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from agents.cli import main

README = (Path(__file__).resolve().parents[3] / "README.md").read_text()


def _commands(group: click.Group, prefix: str = "lockstep"):
    for name, command in group.commands.items():
        full = f"{prefix} {name}"
        if isinstance(command, click.Group):
            yield from _commands(command, full)
        else:
            yield full, command


def test_every_command_has_help_and_a_readme_section():
    commands = list(_commands(main))
    assert len(commands) >= 9
    for full, command in commands:
        assert command.help and len(command.help) > 40, f"{full} needs help text"
        assert f"### `{full}`" in README, f"README.md needs a section for {full}"
        result = CliRunner().invoke(main, [*full.split()[1:], "--help"])
        assert result.exit_code == 0 and "Usage:" in result.output


def test_every_command_has_json():
    for full, command in _commands(main):
        assert any(p.name == "as_json" for p in command.params), f"{full} lacks --json"


def test_quick_start_has_the_two_commands():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    assert "lockstep demo" in quick and "pytest" in quick


def test_the_readme_names_every_ledger_kind_and_no_hand_written_ledger_path():

    from ledger import BY_KIND

    recorded = set(BY_KIND)  # the catalogue of ledger records (ledger/records.py)
    assert {"claim.granted", "verify.result", "probe.result", "plan.step.started"} <= recorded
    section = README.split("## The ledger", 1)[1].split("\n## ", 1)[0]
    assert not {kind for kind in recorded if f"`{kind}`" not in section}
    assert ".git/lockstep" not in README  # a linked worktree's .git is a file: `lockstep where`


def test_every_help_ends_with_examples_and_keeps_snippets_unwrapped():
    import re

    for full, _command in _commands(main):
        text = CliRunner().invoke(main, [*full.split()[1:], "--help"], terminal_width=80).output
        tail = re.split(r"\n\s*Examples:\n", text.rstrip())
        assert len(tail) == 2 and "Options:" not in tail[1], f"{full} --help must end with examples"
        examples = [line.strip() for line in tail[1].splitlines() if line.strip()]
        assert 2 <= len(examples) <= 3 and all("lockstep " in e for e in examples), (full, examples)
    claude = CliRunner().invoke(main, ["hook", "claude", "--help"], terminal_width=80).output
    assert '"hooks": {"PreToolUse": [{"matcher": "Write|Edit|MultiEdit|NotebookEdit|Bash",' in claude  # one line, as written
