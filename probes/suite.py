"""The verify suite: the project's checks, from ``[checks.NAME]`` or detected.

A check is a shell command that passes when it exits 0; ``lockstep verify`` runs the
suite as ``command`` probes (``Check.to_spec``), read-only checks in parallel,
``autofix`` ones after them, one at a time.  With no ``checks`` key in lockstep.toml
the suite is ``detect_suite``'s, from the project's own manifests.
"""

from __future__ import annotations

import json
from pathlib import Path

from probes.model import ProbeSpec
from probes.schema import PositiveSeconds, RelPath, Table, Text

DEFAULT_CHECK_TIMEOUT = 600.0  # 10m: a whole test suite may be slow; a hung one is not


class CheckTable(Table, kw_only=True):
    """``[checks.NAME]``: one check of the verify suite."""

    cmd: Text  # a shell command; the check passes when it exits 0
    timeout: PositiveSeconds = DEFAULT_CHECK_TIMEOUT
    autofix: bool = False  # it changes files: run after the read-only checks, serially
    cwd: RelPath | None = None  # repo-relative; None is the repository root


class Check(CheckTable, kw_only=True):
    """One check of the verify suite, named by its table."""

    name: str

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
