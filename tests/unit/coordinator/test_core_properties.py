"""Property tests of the core's invariants over random histories (hypothesis).

Random sequences of hello / claim / intent / release / heartbeat / time passing /
process exits / bye / coordinator restarts, checking after every step:

* no two live agents hold overlapping claims where either is exclusive (strict mode);
* new tokens strictly increase, across restarts (a re-claim gets its live grant's token);
* a released or expired grant never comes back.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from protocol import messages as m
from protocol.paths import overlaps

from .core_driver import HOST, Driver

NAMES = ["ann", "bob", "cid"]
PATTERNS = [
    "src/",
    "src/a.py",
    "src/b.py",
    "src/*.py",
    "src/api/x.py",
    "docs/**",
    "**/test_*.py",
    "tests/test_x.py",
    "tests/",
    "README.md",
]
FILES = ["src/a.py", "src/b.py", "src/api/x.py", "docs/i.md", "tests/test_x.py", "README.md"]


class CoreMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.d = Driver(heartbeat=1.0, liveness=3, lock_delay=2.0)
        self.sessions: dict[str, str] = {}  # name -> session, as each agent believes
        self.tokens: list[int] = []
        self.ended: set[tuple[str, int, str]] = set()  # (agent, token, pattern) released/expired
        self.seen_records = 0

    # ----------------------------------------------------------------- helpers

    def _note(self, reply) -> None:
        if isinstance(reply, m.Granted) and reply.token in self.tokens:
            # a re-claim is answered with the live grant that already holds those patterns
            live = {(e.token, e.pattern.text) for e in self.d.core.registry.all_entries()}
            assert all((reply.token, p) in live for p in reply.patterns), reply
        elif isinstance(reply, m.Granted):
            assert not self.tokens or reply.token > self.tokens[-1], (reply.token, self.tokens[-1:])
            self.tokens.append(reply.token)
        if isinstance(reply, m.Decision) and reply.token is not None and reply.token not in self.tokens:
            assert not self.tokens or reply.token > self.tokens[-1]
            self.tokens.append(reply.token)
        if isinstance(reply, m.Welcome):
            self.sessions[reply.agent] = reply.session

    def _collect_ended(self) -> None:
        for record in self.d.records[self.seen_records :]:
            if record.KIND in ("claim.released", "claim.expired"):
                for pattern in record.patterns:
                    self.ended.add((record.agent, record.token, pattern))
        self.seen_records = len(self.d.records)

    # ----------------------------------------------------------------- rules

    @rule(name=st.sampled_from(NAMES), kind=st.sampled_from(["session", "run", "oneshot"]))
    def hello(self, name, kind):
        pid = 1000 + NAMES.index(name) if kind == "run" else None
        self._note(self.d.send(m.Hello(agent=name, kind=kind, pid=pid, host=HOST, session=self.sessions.get(name))))

    @precondition(lambda self: self.sessions)
    @rule(data=st.data(), shared=st.booleans(), count=st.integers(1, 3))
    def claim(self, data, shared, count):
        name = data.draw(st.sampled_from(sorted(self.sessions)))
        paths = data.draw(st.lists(st.sampled_from(PATTERNS), min_size=1, max_size=count))
        self._note(self.d.claim(self.sessions[name], *paths, shared=shared))

    @precondition(lambda self: self.sessions)
    @rule(data=st.data(), use_token=st.booleans())
    def intent(self, data, use_token):
        name = data.draw(st.sampled_from(sorted(self.sessions)))
        path = data.draw(st.sampled_from(FILES))
        token = data.draw(st.sampled_from(self.tokens)) if use_token and self.tokens else None
        self._note(self.d.intent(self.sessions[name], path, token=token))

    @precondition(lambda self: self.sessions)
    @rule(data=st.data(), everything=st.booleans())
    def release(self, data, everything):
        name = data.draw(st.sampled_from(sorted(self.sessions)))
        paths = [] if everything else [data.draw(st.sampled_from(PATTERNS))]
        self.d.send(m.Release(session=self.sessions[name], paths=paths, all=everything))

    @rule(seconds=st.sampled_from([0.3, 1.0, 2.5, 4.0]), keep=st.sets(st.sampled_from(NAMES)))
    def time_passes(self, seconds, keep):
        alive = tuple(self.sessions[n] for n in keep if n in self.sessions)
        self.d.advance(self.d.now + seconds, keep_alive=alive)

    @precondition(lambda self: self.sessions)
    @rule(name=st.sampled_from(NAMES))
    def process_exits(self, name):
        if name in self.sessions:
            self.d.exited(self.sessions[name])

    @precondition(lambda self: self.sessions)
    @rule(name=st.sampled_from(NAMES))
    def bye(self, name):
        if name in self.sessions:
            self.d.send(m.Bye(session=self.sessions[name]))

    @rule(downtime=st.sampled_from([0.5, 30.0]))
    def restart(self, downtime):
        self._collect_ended()
        self.d = self.d.restart(at=self.d.now + downtime)
        self.seen_records = len(self.d.records) - 1  # only the new coordinator.started

    # ----------------------------------------------------------------- invariants

    @invariant()
    def no_overlapping_exclusive_claims_between_live_agents(self):
        reg = self.d.core.registry
        entries = [e for e in reg.all_entries() if reg.agents[e.agent].live]
        for i, a in enumerate(entries):
            for b in entries[i + 1 :]:
                if a.agent != b.agent and "exclusive" in (a.access, b.access):
                    assert not overlaps(a.pattern, b.pattern), (a, b)

    @invariant()
    def only_live_agents_hold_claims(self):
        reg = self.d.core.registry
        assert all(reg.agents[e.agent].live for e in reg.all_entries())

    @invariant()
    def released_or_expired_grants_never_come_back(self):
        self._collect_ended()
        live = {(e.agent, e.token, e.pattern.text) for e in self.d.core.registry.all_entries()}
        assert not (live & self.ended)


CoreMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
TestCoreInvariants = CoreMachine.TestCase
