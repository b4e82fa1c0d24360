"""The ``lockstep`` command line: one group, its verbs registered by topic.

``base`` holds the group, the shared options and the exit-code contract; each other
module adds its verbs to the group when imported: ``serve`` (serve, stop), ``claims``
(claim, release, intent), ``state`` (status, ledger, top), ``runs`` (run, demo),
``checks`` (check, verify, done, plan) and ``hooks`` (hook, guard, mcp).
"""

from . import checks, claims, hooks, runs, serve, state  # noqa: F401  (importing them registers their verbs)
from .base import main

__all__ = ["main"]
