"""Settings shared by every test."""

import compileall
import os
from pathlib import Path

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
# workers). Without bytecode each of them compiles the project's modules from source
# again: ~0.5 s of CPU for every coordinator start, tens of ms for every CLI call. An
# installed lockstep runs from bytecode (pip compiles it), so the project's modules are
# compiled once here, before any test starts. Only into the project's own __pycache__:
# the environment is left as it is (under PYTHONDONTWRITEBYTECODE the processes still
# read the bytecode but write none, in the project or in the tests' repositories).
if "PYTEST_XDIST_WORKER" not in os.environ:  # once, in the process that starts the workers
    _project = Path(__file__).resolve().parents[1]
    for _package in ("protocol", "coordinator", "agents", "probes", "ledger", "tests"):
        compileall.compile_dir(_project / _package, quiet=1)
