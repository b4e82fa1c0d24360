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

# The tests start thousands of Python processes (the CLI, hooks, coordinators, probe
# workers). With PYTHONDONTWRITEBYTECODE in the environment each of them recompiles the
# project's modules from source: ~0.5 s of CPU for every coordinator start, tens of ms for
# every CLI call. An installed lockstep runs from bytecode, so the tests' processes may
# write (and then read) __pycache__ too, as bench/bench_cli.py's do.
os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
