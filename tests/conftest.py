"""Settings shared by every test."""

import os

from hypothesis import settings

# Hypothesis' default 200 ms deadline per example is a speed threshold: on a loaded machine
# it fails property tests that are right. What they check is behaviour, so no deadline.
settings.register_profile("lockstep", deadline=None)
settings.load_profile("lockstep")

# pytest-xdist's workers start with LINES=24 and COLUMNS=80 in their environment, which
# every child process would take for its terminal's size (`lockstep top` in a 60-row tmux
# pane drew 24 rows). A test that wants a size sets it itself.
for _name in ("LINES", "COLUMNS"):
    os.environ.pop(_name, None)
