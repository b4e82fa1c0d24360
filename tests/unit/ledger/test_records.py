"""The catalogue of ledger records: the docs list it exactly, every kind round-trips
through a real ledger file, and a ledger written before there were types still replays."""

from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path

import msgspec
import pytest

from coordinator.core import Core
from coordinator.registry import STATE_KINDS
from coordinator.settings import Settings
from ledger import Ledger, LedgerError
from ledger import records as rec
from ledger.records import BY_KIND, CATALOGUE, HEADER, data_of
from probes import plan as plans
from protocol.messages import Conflict, ProbeRequest

ROOT = Path(__file__).resolve().parents[3]
KIND = re.compile(r"`([a-z_]+(?:\.[a-z_]+)*)`")


def _section(text: str, heading: str) -> str:
    return text.split(heading, 1)[1].split("\n## ", 1)[0]


def test_readme_lists_exactly_the_catalogue():
    section = _section((ROOT / "README.md").read_text(), "## The ledger")
    listed = section.split("The kinds:", 1)[1].split("Heartbeats", 1)[0]
    assert set(KIND.findall(listed)) == set(BY_KIND)


def test_docs_table_lists_every_kind_with_its_data_keys():
    rows = {}
    for line in (ROOT / "docs" / "ledger.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| `") and len(cells) == 3:
            rows[cells[0].strip("`")] = cells[1]
    assert set(rows) == set(BY_KIND)
    for kind, keys in rows.items():
        if keys.startswith("as `"):
            keys = rows[keys[len("as `") : -1]]
        names = [k.strip("*`") for k in keys.split(", ")] if keys != "—" else []
        assert names == list(rec._layout(BY_KIND[kind]).names), kind


def test_the_catalogue_is_consistent():
    assert len(BY_KIND) == len(CATALOGUE)  # no kind twice
    for cls in CATALOGUE:
        camel = "".join(part.capitalize() for part in re.split(r"[._]", cls.KIND))
        assert cls.__name__ == camel, f"{cls.KIND} is {cls.__name__}"
        assert cls.__struct_config__.frozen
        for other in CATALOGUE:  # `match` on one kind never catches another
            assert other is cls or not issubclass(other, cls)
    assert {c.KIND for c in CATALOGUE if c.DURABLE} == {"coordinator.started", "tokens.reserved"}
    assert set(rec.PLAN_TRANSITIONS) == set(plans.PLAN_LEDGER_KINDS)
    assert STATE_KINDS <= set(BY_KIND)


def _transition(kind: str) -> dict:
    return dict(job="1.3", kind=kind, plan="p", step="s", event="run_passed", from_state="running", to_state="done", attempt=1)


SAMPLES: list[rec.Record] = [
    rec.CoordinatorStarted(epoch=3, mode="parallel-block", pid=9, endpoints=["ipc://x"], live_agents=1, claims=2),
    rec.CoordinatorStopped(reason="signal SIGTERM"),
    rec.CoordinatorPaused(gap=1.5),
    rec.LedgerCompacted(removed=120, upto=300, before=1_700_000_000.0),
    rec.TokensReserved(upto=1000),
    rec.AgentJoined(agent="a", session="3.1", kind="run", worktree="/w", host="h", pid=5, pid_started=1.25, ttl=None, notice="old session expired"),
    rec.AgentWatched(agent="a", session="3.1", pid=5, pid_started=None),
    rec.AgentAdopted(agent="a", session="3.1", kind="run", pid=5, pid_started=1.25, previous="3.0"),
    rec.AgentStale(agent="a", session="3.1", reason="no heartbeat for 9.0s"),
    rec.AgentLeft(agent="a", session="3.1", reason="bye"),
    rec.AgentForgotten(sessions=["1.1", "1.2"]),
    rec.AgentBlocked(agent="a", reason="write lost: retry"),
    rec.ClaimGranted(agent="a", session="3.1", token=7, patterns=["src/**"], access="shared", ttl=30.0, auto=False),
    rec.ClaimRefused(agent="a", session="3.1", patterns=["x.py"], reason="held", conflicts=[Conflict(holder="b", pattern="x.py", access="exclusive", token=2)]),
    rec.ClaimReleased(agent="a", session="3.1", token=7, patterns=["src/**"], reason="forced by ops: stuck", hold_for=0.0, forced=True, by="ops"),
    rec.ClaimExpired(agent="a", session="3.1", token=7, patterns=["src/**"], reason="a: no heartbeat", hold_for=15.0),
    rec.ReleaseUncommitted(agent="a", session="3.1", paths=["src/x.py"], patterns=["src/"], worktree="/w/a", when="session end"),
    rec.IntentDecided(agent="a", session="3.1", token=8, verdict="allow", reason="allowed", paths=["x.py"]),
    rec.WriteUnannounced(agent="a", session="3.1", paths=["x.py"], holders=["b"], source="claude PostToolUse Bash", conflicts=[Conflict(holder="b", pattern="x.py", access="exclusive", token=2)]),
    rec.MergeHeld(agent="a", session="3.1", paths={"x.py": ["c1", "c2"]}, branch="refs/heads/a", target="main"),
    rec.MergeFreed(agent="a", paths=["x.py"], branch="refs/heads/a", reason="abandoned by op: dead", forced=True, by="op"),
    rec.LandQueued(agent="a", job="1.3", branch="refs/heads/a", head="c" * 40, cwd="/w"),
    rec.LandPreflight(agent="a", job="1.3", branch="refs/heads/a", base="b" * 40, attempt=2),
    rec.LandVerifying(agent="a", job="1.3", branch="refs/heads/a", base="b" * 40, candidate="d" * 40, checks=["test"]),
    rec.LandRequeued(agent="a", job="1.3", branch="refs/heads/a", reason="main moved", attempt=1),
    rec.LandLanded(agent="a", job="1.3", branch="refs/heads/a", commit="d" * 40, base="b" * 40, changed=["x.py"], commits=["c" * 40], waited=1.5, took=3.0),
    rec.LandRefused(
        agent="a", job="1.4", branch="refs/heads/a", verdict="conflict", reason="x.py conflicts",
        conflicts=[{"path": "x.py", "hunks": [{"line": 2, "ours": ["1"], "theirs": ["2"]}]}], failed=[],
    ),
    rec.JobStarted(agent="a", session="3.1", job="3.1", kind="check", probe=ProbeRequest(kind="write", params={"path": "x"}), cwd="/w"),
    rec.ProbeResult(agent="a", job="3.1", name="w", kind="write", target="x", verdict="pass", details={"hash": "abc"}),
    rec.VerifyResult(agent="a", job="3.2", name="tests", kind="command", target="pytest", verdict="fail", exit_code=1, finding="command failed"),
    rec.JobFinished(agent="a", job="3.1", kind="check", verdict="pass", reason="1 check passed"),
    rec.DeploySeen(agent="a", url="https://app.example.com/app.js", hash="ab" * 32, size=1234, probe="served", job="3.1", previous=""),
    rec.VerifyFinished(agent="a", job="3.2", kind="verify", verdict="fail", reason="1 of 1 failed", passed=False, failed=["tests"], tree="ab12"),
    rec.VerifyRefused(agent="a", session="3.1", reason="bound reached"),
    rec.TurnStarted(agent="a", session="3.1"),
    rec.StopDecided(agent="a", session="3.1", verdict="allow", reason="turn ends failing", tree="ab12", job="3.2", failed=["tests"]),
    rec.DoneDecided(agent="a", session="3.1", verdict="block", reason="no verify run"),
    rec.HandoffChecked(agent="a", session="3.1", job="4.2", target="/w/HANDOFF.md", score=40, threshold=85, passed=False, false_facts=["commit abc1234 is cited, but no such commit"], missing=["x"]),
    rec.RuleDecided(agent="a", job="3.2", action="retry", params={"max": 3, "attempt": 1}, reason="default rule 4", finding="write lost", probes=["w"]),
    rec.RuleResponse(agent="a", job="3.2", action="retry", params={"max": 3, "attempt": 1}, reason="default rule 4", finding="write lost", probes=["w"], outcome="asked a to retry"),
    rec.Notice(agent=None, message="endpoint failing", operator=True),
    rec.RuleResolved(agent=None, rule="default rule 4 (any other finding -> notify)", action="notify", finding="endpoint failing", probes=["api"]),
    rec.TaskQueued(agent="b", task="fix the build", because="build produced nothing"),
    rec.TaskQueued(agent=None, task="restart the api", id=2, by="operator"),
    rec.TaskTaken(agent="b", session="1.2", id=2),
    rec.TaskDone(agent="b", session="1.2", id=2, note="restarted"),
    rec.MessageSent(agent="b", id=1, text="take the docs", sender="a"),
    rec.InboxDelivered(agent="b", session="1.2", messages=[1], tasks=[1], via="UserPromptSubmit"),
    rec.PeerCutOff(agent="a", session="1.2", peer="00e1f2", replies=40, bytes=17_000_000, budget=16_777_216),
    *(cls(agent="a", **_transition(kind)) for kind, cls in rec.PLAN_TRANSITIONS.items()),
    rec.PlanStopped(agent="a", job="1.3", plan="p", step="s", by="ops", reason="wrong tag"),
]


def test_samples_cover_the_catalogue():
    assert {type(r) for r in SAMPLES} == set(CATALOGUE)


def test_every_kind_round_trips_through_a_ledger_file(tmp_path):
    with Ledger.open(tmp_path / "l.db") as led:
        led.append(SAMPLES, epoch=3)
        events = list(led.events())
        typed = list(led.records(kinds=BY_KIND))
    assert [e.kind for e in events] == [r.KIND for r in SAMPLES]
    assert [r for _, r in typed] == SAMPLES
    for event, record in zip(events, SAMPLES):
        assert (event.agent, event.session, event.token) == (record.agent, record.session, record.token)
        assert event.data == msgspec.to_builtins(data_of(record))
        assert not set(event.data) & set(HEADER) - set(type(record).ALSO_IN_DATA)


def test_unset_keys_are_left_out_as_before():
    assert "notice" not in data_of(rec.AgentJoined(agent="a", session="1.1"))
    assert set(data_of(rec.ClaimReleased(agent="a", session="1.1", token=1, patterns=["x"]))) == {"patterns", "reason", "hold_for"}
    assert data_of(rec.Notice(message="m")) == {"message": "m"}
    assert set(data_of(rec.JobStarted(job="1.1", kind="verify", cwd="/w"))) == {"job", "kind", "cwd"}


def test_a_row_that_does_not_fit_its_kind_is_a_clear_error(tmp_path):
    path = tmp_path / "l.db"
    with Ledger.open(path) as led:
        led.append([rec.TokensReserved(upto=5)], epoch=1)
    with sqlite3.connect(path) as conn:
        conn.execute("INSERT INTO events VALUES (2, 0, 1, 'tokens.reserved', NULL, NULL, NULL, '{\"upto\": \"many\"}')")
        conn.execute("INSERT INTO events VALUES (3, 0, 1, 'no.such.kind', NULL, NULL, NULL, '{}')")
    with Ledger.open(path) as led:
        with pytest.raises(LedgerError, match=r"event 2 \(tokens.reserved\) cannot be read"):
            list(led.records(kinds=["tokens.reserved"]))
        with pytest.raises(LedgerError, match="event 3 has kind 'no.such.kind'"):
            list(led.records(kinds=["no.such.kind"]))


def test_a_row_whose_data_is_not_a_json_object_is_a_clear_error_in_every_reader(tmp_path):
    deep = "[" * 100_000 + "]" * 100_000  # SQLite columns hold whatever was put there
    for number, data in enumerate((deep, b"\x00\xff", 7, "not json")):
        path = tmp_path / f"l{number}.db"
        with Ledger.open(path) as led:
            led.append([rec.TokensReserved(upto=5)], epoch=1)
        with sqlite3.connect(path) as conn:
            conn.execute("INSERT INTO events VALUES (2, 0, 1, 'tokens.reserved', NULL, NULL, NULL, ?)", (data,))
        with Ledger.open(path) as led:
            for read in (lambda: list(led.records(kinds=["tokens.reserved"])), lambda: led.tail(5), lambda: list(led.events())):
                with pytest.raises(LedgerError, match=r"event 2 \(tokens.reserved\) has data that is not a JSON object"):
                    read()


# A ledger as the coordinator wrote it before the catalogue: rows built from hand-made
# dicts (copied from that code), including keys the old writers left out on old rows.
OLD_ROWS = [
    ("coordinator.started", None, None, None, {"epoch": 1, "mode": "parallel-block", "pid": 1, "endpoints": [], "live_agents": 0, "claims": 0}),
    ("tokens.reserved", None, None, None, {"upto": 1000}),
    ("agent.joined", "alice", "1.1", None, {"kind": "session", "worktree": "/w/a", "host": "h", "pid": None, "pid_started": None, "ttl": None}),
    ("agent.joined", "bob", "1.2", None, {"kind": "run", "worktree": "/w/b", "host": "h", "pid": 77}),  # older: no pid_started, ttl
    ("agent.watched", "bob", "1.2", None, {"pid": 78}),
    ("claim.granted", "alice", "1.1", 1, {"patterns": ["src/**"], "access": "exclusive", "ttl": None}),  # older: no auto
    ("claim.granted", "bob", "1.2", 2, {"patterns": ["docs/*.md", "README.md"], "access": "shared", "ttl": None, "auto": False}),
    ("intent.decided", "alice", "1.1", 1, {"verdict": "allow", "reason": "allowed", "paths": ["src/a.py"], "token": 1, "holders": [], "conflicts": []}),
    ("claim.released", "bob", "1.2", 2, {"patterns": ["README.md"], "reason": "forced by ops: x", "hold_for": 0.0, "forced": True, "by": "ops"}),
    ("job.started", "alice", "1.1", None, {"job": "1.1", "kind": "verify", "cwd": "/w/a"}),
    ("verify.finished", "alice", None, None, {"job": "1.1", "kind": "verify", "verdict": "fail", "reason": "1 of 1 failed", "responses": [], "passed": False, "failed": ["tests"]}),
    ("agent.blocked", "alice", None, None, {"reason": "write lost: retry"}),
    ("agent.stale", "bob", "1.2", None, {"reason": "no heartbeat for 9.0s"}),
    ("claim.expired", "bob", "1.2", 2, {"patterns": ["docs/*.md"], "reason": "bob: no heartbeat", "hold_for": 15.0}),
    ("coordinator.stopped", None, None, None, {"reason": "signal SIGTERM"}),
]


def test_a_ledger_written_before_the_catalogue_replays(tmp_path):
    path = tmp_path / "old.db"
    Ledger.open(path).close()  # the schema
    with sqlite3.connect(path) as conn:
        conn.executemany(
            "INSERT INTO events (id, ts, epoch, kind, agent, session, token, data) VALUES (?, 0, 1, ?, ?, ?, ?, ?)",
            [(i, kind, agent, session, token, json.dumps(data, separators=(",", ":"))) for i, (kind, agent, session, token, data) in enumerate(OLD_ROWS, 1)],
        )
    with Ledger.open(path) as led:
        history = [r for _, r in led.records(kinds=STATE_KINDS)]
    core = Core(Settings(), host="h")
    core.start(history, 100.0)
    reg = core.registry
    assert reg.epoch == 2 and reg.next_token == 1001
    assert reg.agents["alice"].live and reg.agents["bob"].state == "stale"
    assert reg.agents["bob"].pid == 78 and reg.agents["bob"].ttl is None
    assert [(e.pattern.text, e.token) for e in reg.all_entries()] == [("src/**", 1)]
    assert [(h.pattern.text, h.former) for h in reg.all_holds()] == [("docs/*.md", "bob")]
    assert reg.blocked == {"alice": "write lost: retry"} and reg.failing_rounds == {"alice": 1}
    assert reg.last_write == {"alice": 1} and reg.last_verify["alice"].failed == ["tests"]


def test_result_and_transition_records_carry_every_field_of_what_they_record():
    from probes.model import ProbeResult as Result

    assert ("job", *Result.__struct_fields__) == rec.ProbeResult.__struct_fields__[len(HEADER) :]
    assert ("job", *plans.TransitionRecord.__struct_fields__) == rec.PlanFinished.__struct_fields__[len(HEADER) :]
