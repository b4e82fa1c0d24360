"""The ``lockstep`` command line: one group, its verbs in modules by topic.

``base`` holds the group, the shared options and the exit-code contract; each other
module adds its verbs to the group when imported: ``serve`` (serve, stop), ``claims``
(claim, release, intent), ``state`` (status, ledger, top), ``runs`` (run, demo),
``checks`` (check, verify, done, plan), ``inbox`` (tasks, send, inbox) and ``hooks``
(hook, guard, mcp).  The group
imports a module only when one of its verbs runs (``base.VERB_MODULES``), and the
entry point (``fast.run``) answers ``intent``, ``claim``, ``hook claude`` and ``status`` without
importing click at all, so the calls an agent makes on every edit (and a script's
polling of ``status``) start fast.

``main`` (the click group) is imported on first use: importing this package costs
nothing, so the entry point's fast path stays fast.
"""

from __future__ import annotations

from typing import Any

__all__ = ["main", "run"]


def __getattr__(name: str) -> Any:
    if name == "main":
        from .base import main

        return main
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def run() -> None:
    """The ``lockstep`` command."""
    from .fast import run as run_fast

    run_fast()
