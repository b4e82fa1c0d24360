"""Tasks and messages that wait for an agent: indexed (a write intent asks how many
wait, which must not walk every message), and bounded (a flood of ``send`` or ``tasks
add`` is refused before it grows the registry)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator import inbox
from coordinator.registry import Registry
from protocol import messages as m

from .core_driver import Driver

AGENTS = ["alice", "bob", "carol"]


def _by_scanning(reg: Registry, name: str) -> tuple[list[int], list[int]]:
    """What ``name`` has not been shown, by walking everything (the definition)."""
    messages = [x.id for x in reg.messages.values() if x.to == name and not x.delivered]
    tasks = [t.id for t in reg.tasks.values() if t.agent == name and t.state == "queued" and not t.delivered]
    return messages, tasks


def _indexed(reg: Registry, name: str) -> tuple[list[int], list[int]]:
    messages, tasks = reg.undelivered(name)
    return [x.id for x in messages], [t.id for t in tasks]


step = st.one_of(
    st.tuples(st.just("send"), st.sampled_from(AGENTS + ["ghost"])),
    st.tuples(st.just("add"), st.sampled_from(AGENTS + [None])),
    st.tuples(st.sampled_from(["take", "done", "inbox", "inbox_all"]), st.sampled_from(AGENTS)),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(step, max_size=40), st.integers(min_value=1, max_value=8))
def test_the_index_of_what_waits_agrees_with_walking_everything_also_after_a_snapshot(steps, pick):
    d = Driver(heartbeat=30, liveness=100)
    sessions = {name: d.hello(name) for name in AGENTS}
    for op, who in steps:
        if op == "send":
            d.send(m.SendText(to=who, text="hi", session=sessions["alice"]))
        elif op == "add":
            d.send(m.Tasks(op="add", agent=who, text="do it"))
        elif op in ("take", "done"):
            d.send(m.Tasks(op=op, id=pick, session=sessions[who]))
        else:
            d.send(m.InboxQuery(session=sessions[who], all=op == "inbox_all"))
        reg = d.core.registry
        for name in AGENTS + ["ghost"]:
            assert _indexed(reg, name) == _by_scanning(reg, name)
            assert reg.waiting(name) == sum(map(len, _by_scanning(reg, name)))
    restored = Registry.from_snapshot(d.core.registry.snapshot(d.now, 1.0), d.now)
    for name in AGENTS + ["ghost"]:
        assert _indexed(restored, name) == _by_scanning(restored, name) == _by_scanning(d.core.registry, name)


def test_a_flood_of_messages_or_tasks_is_refused_before_it_grows_the_registry(monkeypatch):
    d = Driver()
    bob = d.hello("bob")
    for _ in range(inbox.UNREAD_PER_AGENT):
        assert isinstance(d.send(m.SendText(to="bob", text="hi")), m.Ok)
    refused = d.send(m.SendText(to="bob", text="one more"))
    assert isinstance(refused, m.Error) and refused.code == "refused" and "bob has 100 messages" in refused.message
    recorded = len(d.records)
    assert d.send(m.SendText(to="bob", text="again")).code == "refused" and len(d.records) == recorded  # nothing recorded
    assert len(d.send(m.InboxQuery(session=bob)).messages) == 100  # bob reads them: room again
    assert isinstance(d.send(m.SendText(to="bob", text="now it fits")), m.Ok)
    # in all, to anyone (to names no agent joined as, too)
    monkeypatch.setattr(inbox, "UNREAD_IN_ALL", 12)
    for n in range(11):
        assert isinstance(d.send(m.SendText(to=f"ghost{n}", text="hi")), m.Ok)
    assert "12 messages wait" in d.send(m.SendText(to="ghost99", text="hi")).message
    monkeypatch.setattr(inbox, "OPEN_TASKS", 3)
    for _ in range(3):
        assert isinstance(d.send(m.Tasks(op="add", text="t")), m.TasksReply)
    full = d.send(m.Tasks(op="add", text="t"))
    assert isinstance(full, m.Error) and full.code == "refused" and "3 tasks are open" in full.message
    assert isinstance(d.send(m.Tasks(op="done", id=1, session=bob)), m.TasksReply)
    assert isinstance(d.send(m.Tasks(op="add", text="t")), m.TasksReply)  # one finished: room for one
