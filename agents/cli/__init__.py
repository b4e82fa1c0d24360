"""The ``lockstep`` command line: one group, its verbs in modules by topic.

``base`` holds the group, the shared options and the exit-code contract; each other
module adds its verbs to the group when imported: ``serve`` (serve, stop), ``claims``
(claim, release, intent), ``state`` (status, ledger, top), ``runs`` (run, demo),
``checks`` (check, verify, done, plan) and ``hooks`` (hook, guard, mcp).  The group
imports a module only when one of its verbs runs (``base.VERB_MODULES``), so a
one-shot call such as ``lockstep intent`` or ``lockstep hook claude`` starts fast.
"""

from .base import main

__all__ = ["main"]
