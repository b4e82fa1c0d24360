"""The broker's side of remote workers (coordinator.workers), without sockets: what it
sends is collected, what workers say is handed to ``receive``, time is trio's mock clock."""

from __future__ import annotations

import pytest
import trio

from coordinator.workers import WorkerBroker, WorkerLost, work_for
from protocol import messages as m
from protocol.codec import decode_reply
from protocol.errors import PeerError

PEER = b"\x00\xff\xffw1"


class Wire:
    def __init__(self) -> None:
        self.sent: list[tuple[bytes, m.Message]] = []

    def send(self, peer: bytes, frame: bytes) -> None:
        self.sent.append((peer, decode_reply(frame)))

    def of(self, kind) -> list[tuple[bytes, m.Message]]:
        return [(peer, message) for peer, message in self.sent if isinstance(message, kind)]


def _result(name: str) -> dict:
    """A probe result as a worker sends it (the fields a ``ProbeResult`` needs)."""
    return {"name": name, "kind": "command", "target": "true", "verdict": "pass"}


def _broker() -> tuple[WorkerBroker, Wire]:
    wire = Wire()
    return WorkerBroker(wire.send, heartbeat=1.0, liveness=3), wire


def _ready(broker: WorkerBroker, peer: bytes = PEER, now: float = 0.0) -> m.WorkerWelcome:
    effects = broker.receive(peer, "alice", m.WorkerReady(req=7, agent="alice", host="laptop", worktrees=["/w"]), now)
    return effects[0].message


async def test_work_goes_to_the_agents_worker_and_its_results_come_back_in_order():
    broker, wire = _broker()
    welcome = _ready(broker)
    assert (welcome.req, welcome.agent, welcome.heartbeat, welcome.liveness) == (7, "alice", 1.0, 3)
    seen = []

    async def progress(message: m.WorkProgress) -> None:
        seen.append(message.result["name"])

    async with trio.open_nursery() as nursery:
        outcome = {}

        async def ask():
            outcome["done"] = await broker.run("alice", work_for("1.4", "verify", cwd="/w"), progress)

        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        [(peer, work)] = wire.of(m.Work)
        assert peer == PEER and work.job == "1.4" and work.kind == "verify"
        assert broker.statistics(0.0)["workers"][0]["running"] == ["1.4"]
        broker.receive(PEER, "alice", m.WorkProgress(job="1.4", result=_result("b"), total=2), 0.1)
        broker.receive(PEER, "alice", m.WorkProgress(job="1.4", result=_result("a"), total=2), 0.2)
        broker.receive(PEER, "alice", m.WorkDone(job="1.4", order=["a", "b"], tree="t"), 0.3)
    assert seen == ["b", "a"] and outcome["done"].order == ["a", "b"] and outcome["done"].tree == "t"
    assert broker.statistics(0.0)["completed"] == 1


async def test_no_worker_names_the_command_to_start():
    broker, _ = _broker()
    with pytest.raises(PeerError) as info:
        await broker.run("alice", work_for("1.1", "suite", cwd="/home/a/clone"), None)
    assert info.value.code == "no_worker" and "lockstep worker" in info.value.message and "/home/a/clone" in info.value.message


@pytest.mark.parametrize("how", ["silence", "bye", "revoked", "replaced"])
async def test_a_worker_lost_mid_job_fails_the_job_with_worker_lost(how, autojump_clock):
    broker, wire = _broker()
    _ready(broker)

    async def progress(message):
        pass

    lost = []

    async def ask():
        try:
            await broker.run("alice", work_for("1.2", "suite"), progress)
        except WorkerLost as exc:
            lost.append(exc)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        if how == "silence":
            broker.beat(2.0)  # within heartbeat x liveness: pinged, kept
            assert broker.has_worker("alice") and wire.of(m.WorkerPing)
            broker.beat(3.5)
        elif how == "bye":
            broker.receive(PEER, "alice", m.WorkerBye(reason="SIGTERM"), 1.0)
        elif how == "revoked":
            assert broker.drop("alice", "the key of alice was revoked")
            assert wire.of(m.WorkerDismissed)[0][0] == PEER
        else:
            _ready(broker, peer=b"\x00\xff\xffw2", now=1.0)
            assert wire.of(m.WorkerDismissed)[0][0] == PEER
    assert len(lost) == 1 and str(lost[0]).startswith("worker lost")
    assert broker.has_worker("alice") == (how == "replaced")
    assert broker.statistics(0.0)["lost"] == 1


def test_a_beat_from_an_unknown_worker_asks_it_to_say_ready_again():
    broker, _ = _broker()
    [effect] = broker.receive(PEER, "alice", m.WorkerBeat(), 0.0)
    assert isinstance(effect.message, m.WorkerDismissed) and effect.message.again
    assert broker.receive(PEER, "alice", m.WorkDone(job="9.9"), 0.0) == []  # late words of a lost worker: ignored


async def test_a_single_checks_result_may_come_with_the_end_of_its_work():
    broker, wire = _broker()
    _ready(broker)
    seen = []

    async def progress(message: m.WorkProgress) -> None:
        seen.append((message.job, message.result["name"]))

    async with trio.open_nursery() as nursery:
        outcome = {}

        async def ask():
            outcome["done"] = await broker.run("alice", work_for("1.5", "suite"), progress)

        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        broker.receive(PEER, "alice", m.WorkDone(job="1.5", order=["write"], results=[_result("write")]), 0.1)
    assert seen == [("1.5", "write")] and outcome["done"].order == ["write"]


async def test_a_remote_result_is_kept_no_bigger_than_a_local_one():
    from probes.output import DEFAULT_LIMIT

    broker, _ = _broker()
    _ready(broker)
    seen = []

    async def progress(message: m.WorkProgress) -> None:
        seen.append(message.result)

    huge = {**_result("test"), "verdict": "fail", "output": "E   boom\n" + "x" * 900_000, "reason": "r" * 50_000,
            "details": {"blob": "d" * 100_000}}
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.run, "alice", work_for("1.6", "suite"), progress)
        await trio.testing.wait_all_tasks_blocked()
        broker.receive(PEER, "alice", m.WorkProgress(job="1.6", result=huge, total=2), 0.1)
        broker.receive(PEER, "alice", m.WorkDone(job="1.6", order=["test", "other"], results=[{**huge, "name": "other"}]), 0.2)
    assert [r["name"] for r in seen] == ["test", "other"]
    for result in seen:
        assert "E   boom" in result["output"] and DEFAULT_LIMIT < len(result["output"]) < DEFAULT_LIMIT + 200
        assert len(result["reason"]) < 2200 and result["details"] == {"cut": "the worker sent more than 16384 bytes of details"}
        assert result["verdict"] == "fail"


async def test_a_worker_flooding_its_job_with_results_is_dropped_and_the_job_fails():
    broker, wire = _broker()
    _ready(broker)
    lost = []

    async def progress(message: m.WorkProgress) -> None:
        pass

    async def ask():
        try:
            await broker.run("alice", work_for("1.7", "suite"), progress)
        except WorkerLost as exc:
            lost.append(str(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        for n in range(1000):  # in one turn, before the job takes any
            broker.receive(PEER, "alice", m.WorkProgress(job="1.7", result=_result(f"c{n}")), 0.1)
    assert lost and "faster than its job could record them" in lost[0]
    assert not broker.has_worker("alice") and "were waiting" in wire.of(m.WorkerDismissed)[0][1].reason


async def _progress_ignored(message: m.WorkProgress) -> None:
    pass


async def test_a_cancelled_job_tells_its_worker_to_end_the_work_and_its_late_result_is_only_logged(caplog):
    broker, wire = _broker()
    _ready(broker)
    recorded = []

    async def progress(message: m.WorkProgress) -> None:
        recorded.append(message)

    with trio.CancelScope() as job_scope:  # the job's scope, as a JobQuery with cancel (Ctrl-C) cancels it
        async with trio.open_nursery() as nursery:
            nursery.start_soon(broker.run, "alice", work_for("2.1", "suite"), progress)
            await trio.testing.wait_all_tasks_blocked()
            job_scope.cancel()
    [(peer, cancel)] = wire.of(m.WorkCancel)
    assert peer == PEER and cancel.job == "2.1" and cancel.reason == "its job was cancelled"
    assert broker.statistics(0.0)["workers"][0]["running"] == [] and broker.statistics(0.0)["cancelled"] == 1
    with caplog.at_level("INFO", logger="lockstep"):
        late = [m.WorkProgress(job="2.1", result=_result("a"), total=1), m.WorkDone(job="2.1", error="cancelled by the coordinator")]
        assert all(broker.receive(PEER, "alice", message, 0.5) == [] for message in late)
    assert recorded == [] and broker.statistics(0.0)["ignored"] == 2 and broker.statistics(0.0)["completed"] == 0
    assert "ignored the end of work '2.1' from alice's worker: no job waits for it" in caplog.text
    assert broker.has_worker("alice")  # a late result costs the worker nothing


async def test_work_that_ended_with_its_work_done_is_not_cancelled():
    broker, wire = _broker()
    _ready(broker)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.run, "alice", work_for("2.2", "suite"), _progress_ignored)
        await trio.testing.wait_all_tasks_blocked()
        broker.receive(PEER, "alice", m.WorkDone(job="2.2", order=["a"], results=[_result("a")]), 0.1)
    assert not wire.of(m.WorkCancel) and broker.statistics(0.0)["cancelled"] == 0


async def test_work_whose_result_cannot_be_read_is_cancelled_on_the_worker():
    """The job fails at its first unreadable result; the rest of the suite must not run on
    the worker for nobody."""
    broker, wire = _broker()
    _ready(broker)
    failed = []

    async def ask():
        try:
            await broker.run("alice", work_for("2.3", "suite"), _progress_ignored)
        except WorkerLost as exc:
            failed.append(str(exc))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        broker.receive(PEER, "alice", m.WorkProgress(job="2.3", result={"name": 5}, total=3), 0.1)
    assert failed and "cannot read" in failed[0]
    [(peer, cancel)] = wire.of(m.WorkCancel)
    assert peer == PEER and cancel.job == "2.3" and "cannot read" in cancel.reason


@pytest.mark.parametrize("how", ["silence", "revoked", "replaced"])
async def test_a_lost_worker_is_not_sent_cancels(how, autojump_clock):
    """Its work failed with ``worker lost``; it was dismissed, or is silent (when it says
    anything again it is told to say ready again, and drops its work then)."""
    broker, wire = _broker()
    _ready(broker)

    async def ask():
        with pytest.raises(WorkerLost):
            await broker.run("alice", work_for("2.4", "suite"), _progress_ignored)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        if how == "silence":
            broker.beat(3.5)
        elif how == "revoked":
            broker.drop("alice", "the key of alice was revoked")
        else:
            _ready(broker, peer=b"\x00\xff\xffw2", now=1.0)
    assert not wire.of(m.WorkCancel)
    assert broker.receive(PEER, "alice", m.WorkDone(job="2.4"), 4.0) == []
    assert broker.statistics(0.0)["ignored"] == 1


async def test_a_welcome_lists_the_work_the_coordinator_still_waits_for_from_that_worker(autojump_clock):
    """A worker saying ready again drops what the welcome does not list: after a silence
    the coordinator forgot it (nothing listed); one it still knows keeps its work."""
    broker, _ = _broker()
    assert _ready(broker).running == []
    async with trio.open_nursery() as nursery:
        nursery.start_soon(broker.run, "alice", work_for("3.1", "suite"), _progress_ignored)
        await trio.testing.wait_all_tasks_blocked()
        assert _ready(broker, now=0.5).running == ["3.1"]  # the same worker, still known: its work stands
        nursery.cancel_scope.cancel()
    broker.beat(10.0)  # silent: lost, forgotten
    assert _ready(broker, now=10.5).running == []
