"""``python -m agents.cli``: the same as the ``lockstep`` command."""

from agents.cli.fast import run

run()
