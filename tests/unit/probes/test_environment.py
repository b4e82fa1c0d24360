"""probes.environment: which venv, which sources first, which variables."""

from __future__ import annotations

import os
from pathlib import Path

from probes.environment import (
    check_environment,
    command_tool,
    editable_sources,
    find_venv,
    resolve_tool,
    tool_version,
    worktree_counterparts,
)


def make_venv(path: Path) -> Path:
    (path / "bin").mkdir(parents=True)
    (path / "pyvenv.cfg").write_text("home = /usr/bin\nversion = 3.11.7\n")
    site = path / "lib" / "python3.11" / "site-packages"
    site.mkdir(parents=True)
    return site


def test_editable_installs_are_found_in_pth_lines_and_setuptools_finders(tmp_path):
    main = tmp_path / "main"
    (main / "src" / "pkg").mkdir(parents=True)
    (main / "flat" / "mod").mkdir(parents=True)
    site = make_venv(main / ".venv")
    (site / "__editable__.pkg-1.0.pth").write_text(f"{main / 'src'}\n")
    (site / "__editable__.mod-1.0.pth").write_text("import __editable___mod_1_0_finder; __editable___mod_1_0_finder.install()\n")
    (site / "__editable___mod_1_0_finder.py").write_text(
        f"import sys\nMAPPING = {{'mod': {str(main / 'flat' / 'mod')!r}}}\nNAMESPACES = {{}}\n"
    )
    (site / "distutils-precedence.pth").write_text("import os; os.environ.get('X')\n")
    assert editable_sources(main / ".venv") == [main / "src", main / "flat"]


def test_sources_in_another_checkout_map_to_the_worktrees_own(tmp_path):
    main, worktree = tmp_path / "main", tmp_path / "wt"
    for root in (main, worktree):
        (root / "src").mkdir(parents=True)
    elsewhere = tmp_path / "vendor"
    elsewhere.mkdir()
    pairs = worktree_counterparts([main / "src", worktree / "src", elsewhere], worktree, [main, worktree])
    assert pairs == [(main / "src", (worktree / "src").resolve())]


def test_venv_choice_order(tmp_path):
    main, worktree = tmp_path / "main", tmp_path / "wt"
    make_venv(main / ".venv")
    worktree.mkdir()
    assert find_venv(worktree, main, None, None)[0] == main / ".venv"
    make_venv(worktree / "venv")
    assert find_venv(worktree, main, None, None)[0] == worktree / "venv"
    make_venv(tmp_path / "active")
    assert find_venv(worktree, main, None, str(tmp_path / "active"))[0] == tmp_path / "active"
    make_venv(worktree / "envs" / "py")
    assert find_venv(worktree, main, "envs/py", str(tmp_path / "active"))[0] == (worktree / "envs" / "py").resolve()
    venv, why = find_venv(worktree, main, "nothing/here", None)
    assert venv is None and "not a virtual environment" in why


def test_the_environment_drops_ours_and_adds_the_agents(tmp_path):
    base = {"PATH": "/usr/bin", "HOME": "/root", "LOCKSTEP_DETACHED": "1", "LOCKSTEP_TIMEOUT": "3", "VIRTUAL_ENV": "/coordinator/venv"}
    where = check_environment(base, tmp_path, agent="carol", verify_env={"A": "1", "B": "1"}, check_env={"B": "2"})
    assert where.env == {"PATH": "/usr/bin", "HOME": "/root", "A": "1", "B": "2", "LOCKSTEP_AGENT": "carol", "LOCKSTEP_WORKTREE": str(tmp_path)}
    assert where.venv is None and "no virtual environment" in where.why[0]


def test_the_command_line_names_its_tool(tmp_path):
    assert command_tool("python -m pytest -x -q") == "python"
    assert command_tool("FOO=1 env BAR=2 npm run test --ignore-scripts && npm run lint") == "npm"
    assert command_tool("$(which python) -V") is None and command_tool("'unclosed") is None
    tool = tmp_path / "bin" / "mytool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\n")
    tool.chmod(0o755)
    assert resolve_tool("mytool", {"PATH": str(tool.parent)}, tmp_path) == str(tool)
    assert resolve_tool("bin/mytool", {}, tmp_path) == str(tool)
    assert resolve_tool("missing-tool", {"PATH": os.defpath}, tmp_path) is None


def test_a_tool_version_is_what_a_successful_version_call_prints_and_nothing_else(tmp_path):
    """A tool with no --version (dash: "Illegal option --", exit 2) has no version, not
    its error message shown as one."""
    versioned, unversioned = tmp_path / "versioned", tmp_path / "unversioned"
    versioned.write_text("#!/bin/sh\necho 'versioned 1.2.3'\n")
    unversioned.write_text("#!/bin/sh\necho \"$0: 0: Illegal option $1\" >&2\nexit 2\n")
    for tool in (versioned, unversioned):
        tool.chmod(0o755)
    assert tool_version(str(versioned)) == "versioned 1.2.3"
    assert tool_version(str(unversioned)) is None
