"""Drive the pure core without sockets: messages in, effects out, time as a number."""

from __future__ import annotations

from coordinator.core import Core
from coordinator.effects import Publish, Send
from coordinator.settings import Settings
from ledger.records import Record
from protocol import messages as m

HOST = "testhost"


class Driver:
    def __init__(self, history: list[Record] | None = None, now: float = 0.0, snapshot=None, **settings) -> None:
        self.core = Core(Settings(**settings), repo="/repo/.git", host=HOST)
        self.records: list[Record] = list(history or [])
        self.publications: list[m.Publication] = []
        self.now = now
        self._absorb(self.core.start(list(history or []), now, snapshot=snapshot))

    def _absorb(self, effects) -> list:
        replies = []
        for effect in effects:
            if isinstance(effect, Record):
                self.records.append(effect)
            elif isinstance(effect, Send):
                replies.append(effect.message)
            elif isinstance(effect, Publish):
                self.publications.append(effect.message)
        return replies

    def advance(self, to: float, step: float = 0.1, keep_alive: tuple[str, ...] = ()) -> None:
        """Tick every ``step`` up to ``to``, as the shell's ticker does (a big jump in one
        call would look like a paused event loop, see ``jump``); the sessions in
        ``keep_alive`` heartbeat at every step."""
        while self.now + step < to:
            self.now += step
            for session in keep_alive:
                self.core.receive("peer", m.Heartbeat(session=session), self.now)
            self._absorb(self.core.tick(self.now))
        self.now = max(self.now, to)

    def jump(self, to: float):
        """One call after a long gap: the event loop stood still."""
        self.now = to
        return self._absorb(self.core.tick(to))

    def send(self, message: m.Message, at: float | None = None):
        if at is not None:
            self.advance(at)
        replies = self._absorb(self.core.receive("peer", message, self.now))
        return replies[-1] if replies else None

    def tick(self, at: float):
        self.advance(at)
        return self._absorb(self.core.tick(self.now))

    def exited(self, session: str, at: float | None = None):
        if at is not None:
            self.advance(at)
        return self._absorb(self.core.process_exited(session, self.now))

    def hello(self, agent: str, kind: str = "session", **fields) -> str:
        welcome = self.send(m.Hello(agent=agent, kind=kind, **fields))
        assert isinstance(welcome, m.Welcome), welcome
        return welcome.session

    def claim(self, session: str, *paths: str, **fields):
        return self.send(m.Claim(session=session, paths=list(paths), **fields))

    def intent(self, session: str, *paths: str, token: int | None = None):
        return self.send(m.Intent(session=session, paths=list(paths), token=token))

    def heartbeat(self, session: str, at: float):
        return self.send(m.Heartbeat(session=session), at=at)

    def status(self) -> m.StatusReply:
        return self.send(m.Status())

    def kinds(self) -> list[str]:
        return [r.KIND for r in self.records]

    def restart(self, at: float, **settings) -> "Driver":
        """A new core rebuilt from this one's records, as after a crash."""
        merged = {f: getattr(self.core.settings, f) for f in self.core.settings.__struct_fields__}
        merged.update(settings)
        return Driver(history=self.records, now=at, **merged)
