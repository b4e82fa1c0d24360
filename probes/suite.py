"""The verify suite: the project's checks, from ``[checks.NAME]`` or detected.

A check is a shell command that passes when it exits 0; ``lockstep verify`` runs the
suite as ``command`` probes (``Check.to_spec``), read-only checks in parallel,
``autofix`` ones after them, one at a time.  With no ``checks`` key in lockstep.toml
the suite is ``detect_suite``'s, from the project's own manifests.
"""

from __future__ import annotations

import re
from pathlib import Path

from probes.model import ProbeSpec
from probes.schema import RelPath, Table, Text, Timeout
from protocol import jsontext

DEFAULT_CHECK_TIMEOUT = 600.0  # 10m: a whole test suite may be slow; a hung one is not


class CheckTable(Table, kw_only=True):
    """``[checks.NAME]``: one check of the verify suite."""

    cmd: Text  # a shell command; the check passes when it exits 0
    timeout: Timeout = DEFAULT_CHECK_TIMEOUT
    autofix: bool = False  # it changes files: run after the read-only checks, serially
    cwd: RelPath | None = None  # repo-relative; None is the repository root
    env: dict[str, str] = {}  # variables set for this check (over [verify] env)


class Check(CheckTable, kw_only=True):
    """One check of the verify suite, named by its table."""

    name: str
    why: str = ""  # for a detected check: why detection chose it

    def to_spec(self, root: str | Path, environment: dict[str, str] | None = None) -> ProbeSpec:
        """The ``command`` probe that runs this check in worktree ``root`` (absolute):
        in ``environment`` (the whole of it: ``probes.environment``) when given, else
        in the coordinator's with this check's ``env`` over it."""
        where = Path(root) if self.cwd is None else Path(root, self.cwd)
        params: dict = {"shell": self.cmd}
        if environment is not None:
            params.update(env=environment, whole_env=True)
        elif self.env:
            params["env"] = dict(self.env)
        return ProbeSpec(
            name=self.name,
            kind="command",
            params=params,
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
    named typecheck, test, lint (``npm_checks``); then ``Cargo.toml`` (``cargo check``,
    ``cargo test``); then ``pyproject.toml`` (``python -m pytest -x -q``).  Each check
    says why it was chosen (``Check.why``).  A ``package.json`` that is not a JSON
    object with a ``scripts`` object yields nothing: guessing at a broken manifest would
    run commands the project never declared.
    """
    root = Path(repo_root)
    checks: list[Check] = []
    package = root / "package.json"
    if package.is_file():
        checks.extend(npm_checks(_npm_scripts(package)))
    if (root / "Cargo.toml").is_file():
        why = "Cargo.toml is present"
        checks.append(Check(name="cargo-check", cmd="cargo check", why=why))
        checks.append(Check(name="cargo-test", cmd="cargo test", why=why))
    if (root / "pyproject.toml").is_file():
        checks.append(Check(name="pytest", cmd="python -m pytest -x -q", why="pyproject.toml is present"))
    return checks


def npm_checks(scripts: dict[str, str]) -> list[Check]:
    """The checks for a package.json's ``scripts``.

    * Each of typecheck, test, lint that is declared runs as ``npm run NAME``, which
      runs its ``preNAME`` too (a project's ``pretest`` is part of its test).
    * A ``postNAME`` (``posttest = "npm audit"``) is not run: it is not part of the
      check and often needs the network.  When one exists the check runs
      ``npm run preNAME --ignore-scripts && npm run NAME --ignore-scripts`` (npm runs
      the named script itself despite ``--ignore-scripts``, but no pre/post script).
    * A script another chosen check already runs (``pretest = "npm run lint"``, or
      the lint command itself inside it) is not run a second time.
    """
    chosen = [name for name in NPM_SCRIPTS if name in scripts]
    checks = []
    for name in chosen:
        runners = [scripts.get(f"pre{other}", "") + "\n" + scripts[other] for other in chosen if other != name]
        covering = next((other for other, text in zip([o for o in chosen if o != name], runners) if _runs_script(text, name, scripts[name])), None)
        if covering is not None:
            continue
        why = f"package.json declares a {name!r} script"
        pre, post = f"pre{name}", f"post{name}"
        if post in scripts:
            steps = [f"npm run {pre} --ignore-scripts"] if pre in scripts else []
            cmd = " && ".join([*steps, f"npm run {name} --ignore-scripts"])
            why += f"; its {post} ({scripts[post]!r}) is not run inside verify: not part of the check, and it may need the network"
        else:
            cmd = f"npm run {name}"  # runs its pre-script too, as `npm test` does
            if pre in scripts:
                why += f", run with its {pre} ({scripts[pre]!r})"
        skipped = [other for other in chosen if other != name and _runs_script(scripts.get(f"pre{name}", "") + "\n" + scripts[name], other, scripts[other])]
        if skipped:
            why += f"; it already runs {', '.join(skipped)}, so no separate check for {'it' if len(skipped) == 1 else 'them'}"
        checks.append(Check(name=f"npm-{name}", cmd=cmd, why=why))
    return checks


def _runs_script(text: str, name: str, command: str) -> bool:
    """Whether shell text ``text`` runs the script ``name`` (whose command is ``command``)."""
    if re.search(rf"\b(?:npm|pnpm|yarn|bun)\s+(?:run(?:-script)?\s+)?{re.escape(name)}\b", text):
        return True
    return bool(command.strip()) and command.strip() in text


def _npm_scripts(package: Path) -> dict[str, str]:
    try:
        manifest = jsontext.loads(package.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return {}
    scripts = manifest.get("scripts") if isinstance(manifest, dict) else None
    if not isinstance(scripts, dict):
        return {}
    return {name: text for name, text in scripts.items() if isinstance(text, str) and text.strip()}
