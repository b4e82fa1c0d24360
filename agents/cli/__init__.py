"""The ``lockstep`` command line: one group, its verbs registered by topic.

``base`` holds the group, the shared options and the exit-code contract; ``checks``
(check, verify, done, plan) and ``hooks`` (hook, guard, mcp) add their verbs to it.
"""

from . import checks, hooks  # noqa: F401  (importing them registers their verbs)
from .base import main

__all__ = ["main"]
