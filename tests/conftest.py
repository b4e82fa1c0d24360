"""Settings shared by every test."""

from hypothesis import settings

# Hypothesis' default 200 ms deadline per example is a speed threshold: on a loaded machine
# it fails property tests that are right. What they check is behaviour, so no deadline.
settings.register_profile("lockstep", deadline=None)
settings.load_profile("lockstep")
