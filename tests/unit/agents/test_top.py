"""`lockstep top`'s view: snapshot plus sequenced updates, gaps healed by a new snapshot;
the live frame: ages that move, keys, the detail pane, paths shortened from the middle."""

from __future__ import annotations

import msgspec

from agents.top import (
    Controls,
    View,
    render,
    seed_from_ledger,
    shorten_middle,
    split_keys,
    visible_agents,
)
from protocol import messages as m


def _snapshot(seq: int, epoch: int = 1) -> m.StatusReply:
    return m.StatusReply(mode="parallel-strict", epoch=epoch, endpoints=[], pub=[], agents=[], claims=[], seq=seq)


def _pub(seq: int, topic: str, epoch: int = 1, **data) -> m.Publication:
    return m.Publication(seq=seq, epoch=epoch, kind=topic, agent="a", data=data)


def test_updates_already_in_the_snapshot_are_ignored_and_newer_ones_applied():
    view = View()
    view.take(_snapshot(seq=5))
    view.apply(_pub(4, "intent.decided", verdict="allow"))
    assert not view.recent and not view.stale_snapshot
    view.apply(_pub(6, "intent.decided", verdict="block", paths=["x"], reason="held"))
    assert view.seq == 6 and len(view.recent) == 1 and not view.stale_snapshot


def test_a_gap_in_seq_asks_for_a_new_snapshot():
    view = View()
    view.take(_snapshot(seq=5))
    view.apply(_pub(8, "job.started", job="1.1", kind="verify"))
    assert view.stale_snapshot and view.gaps == 1
    view.take(_snapshot(seq=8))
    assert not view.stale_snapshot


def test_a_new_epoch_is_not_a_gap_but_needs_a_snapshot():
    view = View()
    view.take(_snapshot(seq=50, epoch=1))
    view.apply(_pub(1, "coordinator.stopped", epoch=2))
    assert view.stale_snapshot and view.gaps == 0 and view.seq == 1


def test_claim_and_agent_changes_refresh_the_tables_and_jobs_are_tracked():
    view = View()
    view.take(_snapshot(seq=0))
    view.apply(_pub(1, "claim.granted", token=3))
    assert view.stale_snapshot
    view.take(_snapshot(seq=1))
    view.apply(_pub(2, "job.started", job="1.2", kind="check"))
    view.apply(_pub(3, "job.progress", job="1.2"))
    assert view.jobs["1.2"]["done"] == 1
    view.apply(_pub(4, "job.finished", job="1.2", kind="check", verdict="pass", reason="ok"))
    assert view.jobs == {} and view.recent[0][1].kind == "job.finished"
    assert render(view) is not None


# ------------------------------------------------------------------ the live frame



def _agent(name: str, seen_ago: float, worktree: str = "/r") -> m.AgentInfo:
    return m.AgentInfo(name=name, state="alive", session=f"s-{name}", kind="session", pid=None, worktree=worktree, last_seen_ago=seen_ago)


def _claim(pattern: str, holder: str, since_ago: float, token: int = 1) -> m.ClaimInfo:
    return m.ClaimInfo(pattern=pattern, holder=holder, token=token, access="exclusive", since_ago=since_ago)


def _text(view: View, controls: Controls | None = None, *, width: int = 120, now: float) -> str:
    from rich.console import Console

    console = Console(width=width, record=True, file=open("/dev/null", "w"))
    console.print(render(view, controls, width=width, now=now))
    return console.export_text()


def _live_view(**fields) -> View:
    view = View()
    snap = m.StatusReply(
        mode="parallel-strict", epoch=1, endpoints=[], pub=[], seq=0,
        agents=[_agent("alice", 0.4), _agent("bob", 2.0, "/r/worktrees/bob")],
        claims=[_claim("src/a.py", "alice", 0.0), _claim("src/b.py", "bob", 5.0, token=2)],
        **fields,
    )
    view.take(snap, now=100.0)
    return view


def test_ages_move_on_every_frame_between_snapshots():
    view = _live_view()
    first = _text(view, now=100.0)
    later = _text(view, now=113.0)
    assert "0.4s" in first and "13.4s" in later  # alice's heartbeat age
    assert "13.0s" in later  # the new claim's age is not stuck at 0.0s


def test_jobs_running_when_the_view_opens_come_from_the_snapshot():
    view = _live_view(jobs=[m.JobInfo(job="1.7", kind="verify", agent="bob", done=2, running_for=4.0)])
    assert view.jobs["1.7"]["agent"] == "bob"
    text = _text(view, now=101.0)
    assert "1.7" in text and "5.0s" in text


def test_keys_quit_sort_filter_pause_and_select():
    view, controls = _live_view(), Controls()
    for key in split_keys("/bo\r"):
        controls.key(key, view, 100.0)
    assert controls.filter == "bo" and controls.typing is None
    text = _text(view, controls, now=100.0)
    assert "bob" in text and "alice" not in text
    controls.key("esc", view, 100.0)
    assert controls.filter == ""
    controls.key("s", view, 100.0)
    assert controls.sort == "age"
    assert [a.name for a, _ in visible_agents(view, controls, 100.0)] == ["bob", "alice"]
    controls.key("p", view, 100.0)
    assert "PAUSED" in _text(view, controls, now=130.0) and "0.4s" in _text(view, controls, now=130.0)
    controls.key("p", view, 130.0)
    assert "30.4s" in _text(view, controls, now=130.0)
    controls.key("j", view, 130.0)
    assert "agent alice" in _text(view, controls, now=130.0)  # sorted by age: bob first, then alice
    assert split_keys("\x1b[Bq") == ["down", "q"]
    controls.key("q", view, 130.0)
    assert controls.quit


def test_the_detail_pane_shows_the_selected_agents_claims_gates_and_jobs():
    view = _live_view(jobs=[m.JobInfo(job="1.3", kind="check", agent="alice")])
    view.apply(_pub(1, "intent.decided", verdict="block", paths=["src/b.py"], reason="held by bob"))
    text = _text(view, now=100.0)
    pane = text[text.index("agent alice") :]
    assert "src/a.py" in pane and "held by bob" in pane and "check 1.3" in pane


def test_gate_history_is_seeded_from_the_ledger():
    from ledger import Event

    view = _live_view()
    seed_from_ledger(view, [Event(1, 0.0, 1, "verify.finished", "bob", None, None, {"job": "1.1", "kind": "verify", "verdict": "fail", "reason": "tests failed"})])
    assert view.by_agent["bob"][0][1].kind == "job.finished"


def test_narrow_terminals_shorten_paths_from_the_middle():
    assert shorten_middle("/home/u/work/repo-worktrees/agent-alice", 16) == "/home/u…nt-alice"
    assert len(shorten_middle("x" * 50, 9)) == 9 and shorten_middle("short", 9) == "short"
    view = _live_view()
    snap = view.snapshot
    long = "/very/long/common/prefix/of/every/worktree/of/this/repository"
    view.take(msgspec.structs.replace(snap, agents=[_agent("a", 1, long + "/alice"), _agent("b", 1, long + "/bob")]), now=100.0)
    text = _text(view, width=80, now=100.0)
    assert all(len(line) <= 80 for line in text.splitlines())
    assert "…" in text and "alice" in text and "/bob" in text


def test_the_merge_queue_shows_in_order_and_a_landing_retakes_the_snapshot():
    landings = [
        m.Landing(job="1.4", agent="alice", branch="wt-alice", target="main", stage="verifying", position=0, took=3.0),
        m.Landing(job="1.5", agent="bob", branch="wt-bob", target="main", stage="queued", position=1, took=1.0),
    ]
    view = _live_view(landings=landings)
    text = _text(view, now=102.0)
    assert "merge queue" in text and text.index("wt-alice") < text.index("wt-bob")
    assert "verifying" in text and "3.0s" in text  # bob's wait moves on with the frame
    view.apply(_pub(1, "land.landed", job="1.4"))
    assert view.stale_snapshot


def _frame_text(view: View) -> str:
    from rich.console import Console

    console = Console(width=120, record=True, file=open("/dev/null", "w"))
    console.print(render(view, width=120))
    return console.export_text()


def test_the_storage_condition_is_in_the_header_from_the_snapshot_and_from_publications():
    view = View()
    failing = msgspec.structs.replace(_snapshot(seq=1), statistics={"storage": {"error": "ledger: disk full at x; grants are refused until it can write", "for_s": 1.0}})
    view.take(failing)
    text = _frame_text(view)
    assert "STORAGE: ledger: disk full at x" in text and "ledger writable" not in text
    view.apply(_pub(2, "coordinator.storage", error="", writable=True))
    assert view.storage_error == "" and "ledger writable" in _frame_text(view)
    view.apply(_pub(3, "coordinator.storage", error="ledger: read-only at y", writable=False))
    assert "STORAGE: ledger: read-only at y" in _frame_text(view)
    view.take(_snapshot(seq=3))
    assert view.storage_error == "" and "STORAGE" not in _frame_text(view)


def test_unannounced_writes_are_kept_from_publications_and_the_ledger():
    from ledger import Event

    view = _live_view()
    held = {"paths": ["src/b.py"], "holders": ["bob"], "source": "run watcher"}
    seed_from_ledger(view, [Event(1, 1000.0, 1, "write.unannounced", "carol", None, None, {**held, "paths": ["src/a.py"], "holders": ["alice"]})])
    view.apply(m.Publication(seq=1, epoch=1, kind="write.unannounced", agent="alice", data=held))
    newest, oldest = view.unannounced
    assert (newest["agent"], newest["paths"], newest["holders"], newest["source"]) == ("alice", ["src/b.py"], ["bob"], "run watcher")
    assert (oldest["agent"], oldest["at"]) == ("carol", 1000.0)
    assert view.by_agent["alice"][0][1].kind == "write.unannounced"  # also among alice's gate decisions
    text = _text(view, now=100.0)
    assert "unannounced writes" in text and "src/b.py" in text and "run watcher" in text
    paused = view.frozen()
    view.apply(m.Publication(seq=2, epoch=1, kind="write.unannounced", agent="alice", data=held))
    assert len(paused.unannounced) == 2 and len(view.unannounced) == 3


def test_responses_resolutions_tasks_and_messages_are_shown_as_gate_lines():
    from agents.top import GATE_KINDS, _describe
    from protocol import messages as m

    pubs = {
        "rule.resolved": ({"finding": "endpoint failing", "probes": ["api"], "action": "notify"}, None, ("resolved", "endpoint failing (api) cleared")),
        "task.queued": ({"id": 3, "task": "bring the api back"}, "bob", ("task", "task 3 for bob: bring the api back")),
        "message.sent": ({"id": 1, "text": "rebase", "sender": ""}, "bob", ("message", "to bob from the operator: rebase")),
    }
    for kind, (data, agent, shown) in pubs.items():
        assert kind in GATE_KINDS
        assert _describe(m.Publication(seq=1, epoch=1, kind=kind, agent=agent, data=data)) == shown


def test_names_and_reasons_are_shown_as_text_never_as_rich_markup():
    """A claim on ``\\[bold]x.txt`` and a message with ``[/bold red]`` once raised
    rich's MarkupError and ended every operator's ``top``."""
    view = View()
    view.take(m.StatusReply(
        mode="parallel-strict", epoch=1, endpoints=[], pub=[], seq=0,
        agents=[_agent("alice", 0.4, worktree="/r/[red]wt")], claims=[_claim("\\[bold]x.txt", "alice", 0.0)],
    ), now=100.0)
    view.apply(_pub(1, "intent.decided", verdict="block", paths=["a[/x]b"], reason="[/bold red] [link=x]held[/link]"))
    text = _text(view, now=100.0)
    assert "\\[bold]x.txt" in text and "/r/[red]wt" in text and "[/bold red] [link=x]held" in text
