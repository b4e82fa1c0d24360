"""Where a check runs: the project's environment, for the agent's own code.

A check tests one agent's work, so it runs in that agent's worktree, with the project's
interpreter and tools, and imports that worktree's sources, not those of whatever
checkout an installed package points at.  ``check_environment`` decides all of it and
says why (``CheckEnvironment.why``), so a report can name what ran.

The environment, in order (later steps win):

1. The coordinator's environment without Lockstep's own variables (every
   ``LOCKSTEP_*``: ``LOCKSTEP_DETACHED`` and the like are ours, not the project's) and
   without the coordinator's own ``VIRTUAL_ENV``.
2. A Python virtual environment, the first that exists of: ``[verify] venv`` in
   lockstep.toml (relative to the worktree); the venv active in the shell that ran
   ``lockstep verify`` (its ``VIRTUAL_ENV``); the worktree's ``.venv``, then ``venv``;
   the main checkout's ``.venv``, then ``venv`` (a linked worktree rarely has its own).
   It is activated as ``activate`` does: ``VIRTUAL_ENV`` set, its ``bin`` first on
   ``PATH``, ``PYTHONHOME`` unset.
3. The worktree's sources first on ``PYTHONPATH`` when the venv holds an *editable
   install pointing outside the worktree* (``editable_sources``): a ``.pth`` path line
   or a setuptools ``__editable__`` finder mapping into another checkout of the same
   repository.  Each such directory is replaced by its counterpart in the worktree
   (same path relative to the checkout), which then shadows the other checkout:
   ``PYTHONPATH`` entries come before site-packages and before the ``.pth`` entries,
   and setuptools' editable finder sits after the path-based one on ``sys.meta_path``.

   Why this and not a venv per worktree: it costs nothing per run (no install, no
   network), leaves the project's venv as the project made it, and is exact for the
   case that matters (an editable install of this repository); a package installed
   normally (not editable) is the project's dependency, not the agent's code, and is
   left alone.
4. ``[verify] env``, then ``[checks.NAME] env``: the project's own variables.
5. ``LOCKSTEP_AGENT`` (when an agent asked) and ``LOCKSTEP_WORKTREE``.

This module reads files (pyvenv.cfg, .pth files) and nothing else; ``tool_version``
runs a ``--version`` and is kept apart.
"""

from __future__ import annotations

import ast
import os
import re
import shlex
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path
from typing import Mapping, Sequence

import msgspec

INTERNAL_PREFIX = "LOCKSTEP_"
VENV_NAMES = (".venv", "venv")
VERSION_TIMEOUT = 10.0  # seconds for a tool's --version


class CheckEnvironment(msgspec.Struct, frozen=True, kw_only=True):
    """The environment a check runs in, and why."""

    env: dict[str, str]  # the whole environment of the check's process
    venv: str | None = None  # the virtual environment used, if any
    pythonpath: list[str] = []  # worktree directories put first on PYTHONPATH
    why: list[str] = []  # one sentence per decision, in order

    def describe(self) -> dict[str, object]:
        """What a report shows (the environment itself is not: it may hold secrets)."""
        return {"venv": self.venv, "pythonpath": self.pythonpath, "why": self.why}


def find_venv(
    worktree: Path, main_checkout: Path | None, configured: str | None, caller_venv: str | None
) -> tuple[Path | None, str]:
    """The venv checks use and why it was chosen (see the module docstring, step 2)."""
    if configured:
        from probes.schema import relpath_problem

        problem = relpath_problem(configured)
        if problem:
            return None, f"[verify] venv: {problem}; none used"
        path = (worktree / configured).resolve()
        if _is_venv(path):
            return path, f"venv {path}: named by [verify] venv"
        return None, f"[verify] venv = {configured!r} is not a virtual environment in {worktree}; none used"
    if caller_venv and _is_venv(Path(caller_venv)):
        return Path(caller_venv), f"venv {caller_venv}: active in the shell that ran verify (VIRTUAL_ENV)"
    for root, whose in ((worktree, "the worktree's"), (main_checkout, "the main checkout's")):
        if root is None:
            continue
        for name in VENV_NAMES:
            if _is_venv(root / name):
                return root / name, f"venv {root / name}: {whose} {name}"
    return None, "no virtual environment found (.venv or venv in the worktree or main checkout): tools from PATH"


def _is_venv(path: Path) -> bool:
    return (path / "pyvenv.cfg").is_file() and (path / "bin").is_dir()


def venv_python_version(venv: Path) -> str | None:
    """The Python version a venv was made with, from its pyvenv.cfg."""
    try:
        text = (venv / "pyvenv.cfg").read_text(errors="replace")
    except OSError:
        return None
    found = re.search(r"^\s*(?:version|version_info)\s*=\s*(\S+)", text, re.MULTILINE)
    return found.group(1) if found else None


def site_packages(venv: Path) -> list[Path]:
    return sorted(venv.glob("lib/python*/site-packages")) + sorted(venv.glob("Lib/site-packages"))


def editable_sources(venv: Path) -> list[Path]:
    """Directories an editable install in ``venv`` puts on the import path: path lines
    of ``.pth`` files, and the parents of what setuptools' ``__editable__`` finders
    map package names to.  Existing directories only, in a stable order."""
    found: list[Path] = []
    for site in site_packages(venv):
        for pth in sorted(site.glob("*.pth")):
            try:
                lines = pth.read_text(errors="replace").splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.strip()
                if line and not line.startswith(("#", "import ")) and Path(line).is_absolute():
                    found.append(Path(line))
        for finder in sorted(site.glob("__editable__*finder.py")):
            for target in _finder_mapping(finder):
                found.append(target.parent if target.suffix == ".py" or target.is_dir() else target)
    unique: list[Path] = []
    for path in found:
        if path.is_dir() and path not in unique:
            unique.append(path)
    return unique


def _finder_mapping(finder: Path) -> list[Path]:
    """The values of ``MAPPING = {...}`` in a setuptools editable finder (read, not run)."""
    try:
        tree = ast.parse(finder.read_text(errors="replace"))
    except (OSError, SyntaxError, ValueError):
        return []
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "MAPPING" for t in node.targets):
            try:
                mapping = ast.literal_eval(node.value)
            except ValueError:
                return []
            return [Path(v) for v in mapping.values() if isinstance(v, str)] if isinstance(mapping, dict) else []
    return []


def worktree_counterparts(sources: Sequence[Path], worktree: Path, checkouts: Sequence[Path]) -> list[tuple[Path, Path]]:
    """(source, its counterpart in ``worktree``) for each source inside another
    checkout of the repository whose counterpart exists."""
    pairs = []
    here = worktree.resolve()
    for source in sources:
        resolved = source.resolve()
        if resolved == here or here in resolved.parents:
            continue  # already the worktree's own
        for checkout in checkouts:
            root = checkout.resolve()
            if root == here or not (resolved == root or root in resolved.parents):
                continue
            counterpart = here / resolved.relative_to(root)
            if counterpart.is_dir():
                pairs.append((source, counterpart))
            break
    return pairs


def check_environment(
    base: Mapping[str, str],
    worktree: Path,
    *,
    agent: str | None = None,
    checkouts: Sequence[Path] = (),
    venv_setting: str | None = None,
    caller_venv: str | None = None,
    verify_env: Mapping[str, str] | None = None,
    check_env: Mapping[str, str] | None = None,
) -> CheckEnvironment:
    """The environment of a check in ``worktree`` (see the module docstring).

    ``base`` is the coordinator's environment; ``checkouts`` every worktree of the
    repository, the main checkout first."""
    env = {k: v for k, v in base.items() if not k.startswith(INTERNAL_PREFIX) and k != "VIRTUAL_ENV"}
    why: list[str] = []
    main = checkouts[0] if checkouts else None
    venv, reason = find_venv(worktree, main, venv_setting, caller_venv)
    why.append(reason)
    pythonpath: list[str] = []
    if venv is not None:
        env["VIRTUAL_ENV"] = str(venv)
        env["PATH"] = os.pathsep.join([str(venv / "bin"), env.get("PATH", os.defpath)])
        env.pop("PYTHONHOME", None)
        pairs = worktree_counterparts(editable_sources(venv), worktree, checkouts)
        for source, counterpart in pairs:
            why.append(f"{counterpart} first on PYTHONPATH: the venv has an editable install from {source}, outside this worktree")
            if str(counterpart) not in pythonpath:
                pythonpath.append(str(counterpart))
        if pythonpath:
            env["PYTHONPATH"] = os.pathsep.join([*pythonpath, *filter(None, [env.get("PYTHONPATH")])])
    for source, extra in (("[verify] env", verify_env), ("the check's env", check_env)):
        if extra:
            env.update(extra)
            why.append(f"{source} sets {', '.join(sorted(extra))}")
    if agent:
        env["LOCKSTEP_AGENT"] = agent
    env["LOCKSTEP_WORKTREE"] = str(worktree)
    return CheckEnvironment(env=env, venv=str(venv) if venv else None, pythonpath=pythonpath, why=why)


def git_checkouts(worktree: Path) -> list[Path]:
    """Every worktree of ``worktree``'s repository, the main checkout first (git's
    order); just ``worktree`` when git cannot say."""
    try:
        out = subprocess.run(
            ["git", "worktree", "list", "--porcelain"], cwd=worktree, capture_output=True, text=True,
            check=True, timeout=VERSION_TIMEOUT, stdin=subprocess.DEVNULL,
        ).stdout
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
        return [worktree]
    roots = [Path(line[len("worktree "):]) for line in out.splitlines() if line.startswith("worktree ")]
    return roots or [worktree]


# --------------------------------------------------------------------------- the tool that runs

_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def command_tool(cmd: str) -> str | None:
    """The program a shell command line starts (``python`` of ``X=1 python -m pytest``),
    or None when it cannot be told (a compound command, a syntax error)."""
    try:
        words = shlex.split(cmd, comments=True)
    except ValueError:
        return None
    while words and (_ASSIGNMENT.match(words[0]) or words[0] in ("env", "exec", "command", "nice", "time")):
        words = words[1:]
    if not words or any(ch in words[0] for ch in "$`|;&<>()"):
        return None
    return words[0]


def resolve_tool(tool: str, env: Mapping[str, str], cwd: Path) -> str | None:
    """The file ``tool`` names for a shell with ``env``'s PATH in ``cwd``."""
    if "/" in tool:
        path = (cwd / tool) if not os.path.isabs(tool) else Path(tool)
        return str(path) if os.access(path, os.X_OK) else None
    return shutil.which(tool, path=env.get("PATH", os.defpath))


def tool_version(path: str) -> str | None:
    """The first line ``path --version`` prints when it succeeds (cached while the file is
    unchanged); None if it fails: ``dash --version`` says "Illegal option --", no version."""
    try:
        info = os.stat(path)
    except OSError:
        return None
    return _version(path, info.st_mtime_ns, info.st_size)


@lru_cache(maxsize=256)
def _version(path: str, mtime_ns: int, size: int) -> str | None:
    try:
        done = subprocess.run(
            [path, "--version"], capture_output=True, text=True, timeout=VERSION_TIMEOUT,
            stdin=subprocess.DEVNULL, errors="replace",
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        return None
    for line in (done.stdout + "\n" + done.stderr).splitlines():
        if line.strip():
            return line.strip()[:120]
    return None
