"""One verify run in one worktree: its checks as that worktree defines them, then the run.

The coordinator runs verify in its own host's worktrees; ``lockstep worker`` runs it in
a worktree on an agent's host.  Both use these two steps, so a check runs the same way
wherever it runs:

* ``verify_specs``: the worktree's ``lockstep.toml`` checks (or the detected ones), each
  as a ``command`` probe in the environment the agent's shell would give it
  (``probes.environment``), and, per check, where and how it runs (the report's
  ``about``).
* ``run_verify``: the read-only checks in parallel, then the autofix ones if all passed
  (``probes.autofix``), and the worktree's content id if it held still during the run
  (the result is about that content only then).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any, Awaitable, Callable

import trio

from probes import autofix, environment
from probes.config import Check, load_config
from probes.model import ProbeError, ProbeResult, ProbeSpec
from probes.pool import ProbePool

log = logging.getLogger("lockstep")

WithLog = Callable[[ProbeSpec], ProbeSpec]  # where a check keeps its whole output, if anywhere


async def verify_specs(
    root: Path, agent: str | None, venv: str = "", with_log: WithLog | None = None
) -> tuple[list[ProbeSpec], dict[str, dict[str, Any]]]:
    """The verify checks of worktree ``root`` as specs, and what the report says about
    each (by check name).  No checks at all is a ``ProbeError``."""
    config = await trio.to_thread.run_sync(load_config, root)
    if not config.checks:
        raise ProbeError(
            f"no verify checks: add [checks.NAME] tables to {root / 'lockstep.toml'} "
            "(nothing could be detected from package.json, Cargo.toml or pyproject.toml)"
        )
    checkouts = await trio.to_thread.run_sync(environment.git_checkouts, root)
    specs, about = [], {}
    for check in config.checks:
        where = environment.check_environment(
            os.environ, root, agent=agent, checkouts=checkouts, venv_setting=config.verify.venv or None,
            caller_venv=venv or None, verify_env=config.verify.env, check_env=check.env,
        )
        spec = check.to_spec(root, where.env)
        about[check.name] = await _about(check, where, Path(spec.cwd or root))
        specs.append(with_log(spec) if with_log is not None else spec)
    return specs, about


async def _about(check: Check, where: environment.CheckEnvironment, cwd: Path) -> dict[str, Any]:
    """What the report says about where and how ``check`` runs."""
    about: dict[str, Any] = where.describe()
    if check.why:
        about["detected"] = check.why
    tool = environment.command_tool(check.cmd)
    path = environment.resolve_tool(tool, where.env, cwd) if tool else None
    about["tool"] = path or tool
    about["version"] = await trio.to_thread.run_sync(environment.tool_version, path) if path else None
    return about


async def run_verify(
    pool: ProbePool, specs: list[ProbeSpec], worktree: Path, holder_of: autofix.HolderOf,
    on_result: Callable[[ProbeResult], Awaitable[None]],
) -> tuple[list[ProbeResult], str]:
    """Run one verify suite: (results in spec order, the content id it ran on or "")."""
    before = await trio.to_thread.run_sync(content_or_nothing, worktree)
    read_only = [spec for spec in specs if not spec.autofix]
    results = await pool.run_suite(read_only, on_result=lambda i, r: on_result(r))
    fixers = [spec for spec in specs if spec.autofix]
    if fixers:
        failed = [r.name for r in results if not r.passed]
        # Shielded from a cancelled run: a fixer's changes to paths others hold are undone
        # after it ends (probes/autofix.py), so it runs to its end (its own timeout).
        with trio.CancelScope(shield=True):
            results += await autofix.run_fixers(pool, fixers, worktree, failed, holder_of, on_result)
    after = await trio.to_thread.run_sync(content_or_nothing, worktree) if before else ""
    order = {spec.name: index for index, spec in enumerate(specs)}
    return sorted(results, key=lambda r: order.get(r.name, len(order))), before if before == after else ""


def content_or_nothing(worktree: Path) -> str:
    """The worktree's content id, or "" when git cannot give one (the run still runs;
    its result is then not keyed on content)."""
    from protocol.content import ContentError, content_id

    try:
        return content_id(worktree)
    except ContentError as exc:
        log.warning("no content id for %s: %s", worktree, exc)
        return ""
