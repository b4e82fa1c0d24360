"""Where checks run and what is kept of them, end to end: a real coordinator, real
commands, real git worktrees (and, for the editable-install case, a real venv)."""

from __future__ import annotations

import sys

from .conftest import cli

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")

# Prints 4000 numbered lines, one failure in the middle, and exits 1: far more than
# the report's budget.
LOUD_CHECK = (
    "import sys\n"
    "for n in range(4000):\n"
    "    print(f'line {n} of the run')\n"
    "    if n == 2000: print('E   assert the middle failed', file=sys.stderr)\n"
    "sys.exit(1)\n"
)


def test_the_whole_output_of_every_check_is_kept_and_printed_by_verify_full(repo, coordinator):
    (repo.root / "loud.py").write_text(LOUD_CHECK)
    (repo.root / "lockstep.toml").write_text(
        f'[checks.loud]\ncmd = "{sys.executable} loud.py"\n\n[checks.quiet]\ncmd = "{sys.executable} -c pass"\n'
    )
    coordinator(*FAST)
    failed = cli("verify", "--json", cwd=repo.root)
    assert failed.rc == 1
    by_name = {r["name"]: r for r in failed.json["results"]}
    log = by_name["loud"]["details"]["log"]
    assert log.startswith(str(repo.state_dir / "checks"))
    kept = open(log, encoding="utf-8").read()
    assert kept.count("of the run\n") == 4000 and "E   assert the middle failed" in kept
    assert len(by_name["loud"]["output"]) < len(kept)  # the report is the cut one
    assert by_name["quiet"]["details"]["log"] != log  # one file per check

    human = cli("verify", cwd=repo.root)
    assert "full output: " in human.err
    job = failed.json["job"]
    full = cli("verify", "--full", job, cwd=repo.root)
    assert full.rc == 0 and full.out.count("of the run\n") == 4000 and "── loud" in full.out
    as_json = cli("verify", "--full", job, "--json", cwd=repo.root)
    assert {c["check"] for c in as_json.json["checks"]} == {"loud", "quiet"}
    missing = cli("verify", "--full", "0.999", cwd=repo.root)
    assert missing.rc == 1 and "no output kept for job '0.999'" in missing.err


# -- the agent's code, in the project's environment -----------------------------------

import json  # noqa: E402
import subprocess  # noqa: E402
import textwrap  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from .conftest import LOCKSTEP, Coordinator, Repo, env_for, wait_until  # noqa: E402

ENV_DUMP = "import json, os, sys; json.dump({'python': sys.executable, 'env': dict(os.environ)}, open(os.environ['DUMP'], 'w'))"


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, timeout=60)


def _editable_install(root: Path) -> str:
    """``root``'s package installed editable into ``root/.venv``; says how."""
    venv = root / ".venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True, timeout=120)
    python = str(venv / "bin" / "python")
    pep660 = subprocess.run(
        [python, "-m", "pip", "install", "-q", "--no-build-isolation", "--no-deps", "--no-index", "-e", str(root)],
        capture_output=True, text=True, timeout=300,
    )
    if pep660.returncode == 0:
        return "pip install -e"
    # An older setuptools without the wheel package cannot build an editable wheel
    # offline; its own develop command makes the same kind of install (a .pth line).
    subprocess.run([python, "setup.py", "-q", "develop"], cwd=root, check=True, capture_output=True, timeout=300)
    return "setup.py develop"


@pytest.fixture(scope="module")
def editable_project(tmp_path_factory) -> tuple[Repo, str]:
    """A src-layout package made here, installed editable from its main checkout into
    the main checkout's .venv, and a linked worktree of the same repository."""
    root = tmp_path_factory.mktemp("editable") / "calc"
    (root / "src" / "calc").mkdir(parents=True)
    (root / "tests").mkdir()
    (root / "pyproject.toml").write_text(textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "calc"
        version = "0.1"
        """))
    (root / "setup.py").write_text("from setuptools import setup\n\nsetup()\n")
    (root / "src" / "calc" / "__init__.py").write_text("def add(a, b):\n    return a + b\n")
    (root / "tests" / "test_calc.py").write_text(
        "import unittest\n\nimport calc\n\n\nclass Add(unittest.TestCase):\n"
        "    def test_add(self):\n        self.assertEqual(calc.add(2, 3), 5)\n"
    )
    (root / ".gitignore").write_text(".venv/\n*.egg-info/\n__pycache__/\n")
    (root / "lockstep.toml").write_text(textwrap.dedent("""\
        [verify]
        env = { CALC_MODE = "strict" }

        [checks.unit]
        cmd = "python -m unittest discover -s tests"

        [checks.dump]
        cmd = "python -c \\"%s\\""
        env = { DUMP = "env.json" }
        """ % ENV_DUMP))
    _git(root, "init", "-q", "-b", "main")
    _git(root, "config", "user.email", "t@example.com")
    _git(root, "config", "user.name", "t")
    _git(root, "add", ".")
    _git(root, "commit", "-q", "-m", "calc")
    how = _editable_install(root)
    other = root.parent / "wt-carol"
    _git(root, "worktree", "add", "-q", str(other))
    return Repo(root=root, other=other), how


@pytest.fixture
def serve_with():
    """``serve_with(repo, env)``: a coordinator started with extra variables in its
    environment (as `serve --detach` starts its child); all are ended afterwards."""
    started: list[Coordinator] = []

    def start(repo: Repo, extra: dict) -> Coordinator:
        c = Coordinator(repo, FAST)
        c.proc = subprocess.Popen(
            [*LOCKSTEP, "serve", *FAST], cwd=repo.root, env=env_for(extra),
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        started.append(c)
        wait_until(c._ready, timeout=20, what="the coordinator to serve")
        return c

    yield start
    for c in started:
        c.stop()


def test_verify_in_a_worktree_tests_the_worktrees_code_not_the_editable_install(editable_project, serve_with):
    repo, how = editable_project
    serve_with(repo, {})
    assert cli("verify", "--json", cwd=repo.root).rc == 0, how  # the main checkout's code is fine
    broken = repo.other / "src" / "calc" / "__init__.py"
    broken.write_text("def add(a, b):\n    return a - b\n")
    try:
        cli("intent", "src/calc/__init__.py", "--agent", "carol", cwd=repo.other)
        failed = cli("verify", "--agent", "carol", "--json", cwd=repo.other)
        assert failed.rc == 1, (how, failed.out, failed.err)
        unit = next(r for r in failed.json["results"] if r["name"] == "unit")
        assert unit["verdict"] == "fail" and "AssertionError: -1 != 5" in unit["output"]
        about = unit["details"]["environment"]
        assert about["pythonpath"] == [str(repo.other / "src")]
        assert any("editable install" in why for why in about["why"])
        assert cli("done", "--agent", "carol", cwd=repo.other).rc == 1
    finally:
        _git(repo.other, "checkout", "--", "src/calc/__init__.py")


def test_checks_run_in_the_projects_venv_with_the_agents_variables_and_none_of_ours(editable_project, serve_with):
    repo, _ = editable_project
    serve_with(repo, {"LOCKSTEP_DETACHED": "1", "LOCKSTEP_SOMETHING_INTERNAL": "x"})
    result = cli("verify", "--agent", "carol", "--explain", cwd=repo.other)
    assert result.rc == 0, result.err
    dump = json.loads((repo.other / "env.json").read_text())
    venv = repo.root / ".venv"
    assert Path(dump["python"]).parent == venv / "bin"  # the main checkout's venv: the worktree has none
    env = dump["env"]
    assert env["VIRTUAL_ENV"] == str(venv) and env["PATH"].startswith(str(venv / "bin"))
    assert env["LOCKSTEP_AGENT"] == "carol" and env["LOCKSTEP_WORKTREE"] == str(repo.other)
    assert "LOCKSTEP_DETACHED" not in env and "LOCKSTEP_SOMETHING_INTERNAL" not in env
    assert env["CALC_MODE"] == "strict" and env["DUMP"] == "env.json"  # [verify] env, [checks.dump] env
    # The report names the interpreter and its version, and --explain says why.
    assert f"[{venv}/bin/python · Python 3." in result.err
    assert "the main checkout's .venv" in result.err and "first on PYTHONPATH" in result.err


def test_the_venv_active_where_verify_runs_is_the_one_checks_use(editable_project, serve_with, tmp_path):
    repo, _ = editable_project
    serve_with(repo, {})
    other_venv = tmp_path / "elsewhere"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(other_venv)], check=True, timeout=120)
    result = cli("verify", "--json", cwd=repo.other, env={"VIRTUAL_ENV": str(other_venv)})
    dump = next(r for r in result.json["results"] if r["name"] == "dump")
    assert dump["details"]["environment"]["venv"] == str(other_venv)
    assert Path(json.loads((repo.other / "env.json").read_text())["python"]).parent == other_venv / "bin"


# -- autofix: after success only, in its lane ------------------------------------------

FORMATTER = (
    "import pathlib\n"
    "for path in sorted(pathlib.Path('src').glob('*.py')):\n"
    "    path.write_text(path.read_text() + '# formatted\\n')\n"
)


def test_autofix_runs_after_success_only_and_never_keeps_changes_to_held_paths(repo, coordinator):
    (repo.root / "src" / "held.py").write_text("held = 1\n")
    _git(repo.root, "add", "src/held.py")
    _git(repo.root, "commit", "-q", "-m", "held")
    (repo.root / "fmt.py").write_text(FORMATTER)
    (repo.root / "lockstep.toml").write_text(
        f'[checks.test]\ncmd = "{sys.executable} -c \'import os, sys; sys.exit(os.path.exists(\\"broken\\"))\'"\n\n'
        f'[checks.fmt]\ncmd = "{sys.executable} fmt.py"\nautofix = true\n'
    )
    coordinator(*FAST)
    assert cli("claim", "src/held.py", "--agent", "bob", cwd=repo.root).rc == 0
    app_before = (repo.root / "src" / "app.py").read_text()

    (repo.root / "broken").write_text("")
    failing = cli("verify", "--agent", "dev", "--json", cwd=repo.root)
    fmt = {r["name"]: r for r in failing.json["results"]}["fmt"]
    assert failing.rc == 1 and fmt["finding"] == "not run" and "test failed" in fmt["reason"]
    assert (repo.root / "src" / "app.py").read_text() == app_before  # nothing moved under the report

    (repo.root / "broken").unlink()
    held = cli("verify", "--agent", "dev", "--json", cwd=repo.root)
    fmt = {r["name"]: r for r in held.json["results"]}["fmt"]
    assert held.rc == 1 and fmt["finding"] == "changed held paths" and "src/held.py (held by bob)" in fmt["reason"]
    assert fmt["details"]["changed"] == ["src/app.py", "src/held.py"]
    assert fmt["details"]["undone"] == [{"path": "src/held.py", "holder": "bob"}]
    assert (repo.root / "src" / "held.py").read_text() == "held = 1\n"  # bob's file as it was
    assert (repo.root / "src" / "app.py").read_text() == app_before + "# formatted\n"  # dev's own stays
    ledger = cli("ledger", "tail", "-n", "100", "--json", cwd=repo.root).out.splitlines()
    recorded = [json.loads(line) for line in ledger]
    fmt_events = [e for e in recorded if e["kind"] == "verify.result" and e["data"].get("name") == "fmt"]
    assert fmt_events[-1]["data"]["details"]["changed"] == ["src/app.py", "src/held.py"]

    assert cli("release", "--all", "--agent", "bob", cwd=repo.root).rc == 0
    passing = cli("verify", "--agent", "dev", "--json", cwd=repo.root)
    assert passing.rc == 0, passing.out


# Appends a line to every file under app/ and src/: a formatter run over the worktree.
FORMAT_ALL = (
    "import os\n"
    "for top in ('app', 'src'):\n"
    "    for folder, _, names in sorted(os.walk(top)):\n"
    "        for name in sorted(names):\n"
    "            with open(os.path.join(folder, name), 'a') as f: f.write('// formatted\\n')\n"
)


def test_autofix_never_keeps_changes_to_held_files_whose_names_hold_glob_characters(repo, coordinator):
    names = {"app/[slug]/page.tsx": "page\n", "app/s/page.tsx": "s\n", "src/a*b.py": "ab\n", "src/q?.py": "q\n"}
    for name, text in names.items():
        (repo.root / name).parent.mkdir(parents=True, exist_ok=True)
        (repo.root / name).write_text(text)
    _git(repo.root, "add", "-A")
    _git(repo.root, "commit", "-q", "-m", "files named with glob characters")
    (repo.root / "fmt.py").write_text(FORMAT_ALL)
    (repo.root / "lockstep.toml").write_text(f'[checks.fmt]\ncmd = "{sys.executable} fmt.py"\nautofix = true\n')
    coordinator(*FAST)
    assert cli("claim", "--literal", "app/[slug]/page.tsx", "--agent", "bob", cwd=repo.root).rc == 0
    assert cli("claim", "--literal", "src/q?.py", "--agent", "carol", cwd=repo.root).rc == 0
    assert cli("claim", "src/a\\*b.py", "--agent", "carol", cwd=repo.root).rc == 0  # the escaped form

    verified = cli("verify", "--agent", "dev", "--json", cwd=repo.root)
    fmt = {r["name"]: r for r in verified.json["results"]}["fmt"]
    assert verified.rc == 1 and fmt["finding"] == "changed held paths"
    assert fmt["details"]["changed"] == ["app/[slug]/page.tsx", "app/s/page.tsx", "src/a*b.py", "src/app.py", "src/q?.py"]
    assert sorted(fmt["details"]["undone"], key=lambda u: u["path"]) == [
        {"path": "app/[slug]/page.tsx", "holder": "bob"}, {"path": "src/a*b.py", "holder": "carol"}, {"path": "src/q?.py", "holder": "carol"},
    ]
    assert "app/[slug]/page.tsx (held by bob)" in fmt["reason"]
    for name in ("app/[slug]/page.tsx", "src/a*b.py", "src/q?.py"):  # the holders' files as they were
        assert (repo.root / name).read_text() == names[name], name
    # the files nobody else holds keep the fix; app/s/page.tsx is not app/[slug]/page.tsx
    assert (repo.root / "app/s/page.tsx").read_text() == "s\n// formatted\n"
    assert (repo.root / "src/app.py").read_text().endswith("// formatted\n")
