"""``python -m agents.cli``: the same as the ``lockstep`` command."""

from agents.cli import main

main()
