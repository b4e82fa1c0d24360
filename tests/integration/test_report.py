"""`lockstep report --html` and `lockstep where`: a known ledger of three agents, made by
a real coordinator, becomes a page whose elements say who held what, who was refused
because of it, the gate decisions, verify runs and checks, and who went stale."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
from html.parser import HTMLParser

import pytest

from .conftest import agent_state, cli, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


class Elements(HTMLParser):
    """Every element as (tag, attributes, the section's agent it is in, its text)."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[dict] = []
        self._open: list[dict] = []
        self._agent: list[str | None] = [None]

    def handle_starttag(self, tag, attrs):
        element = {"tag": tag, **{k: v or "" for k, v in attrs}, "agent": self._agent[-1], "text": ""}
        if tag == "section":
            self._agent.append(element.get("data-agent"))
            element["agent"] = self._agent[-1]
        self.elements.append(element)
        if tag not in ("meta", "br"):
            self._open.append(element)

    def handle_endtag(self, tag):
        while self._open:
            element = self._open.pop()
            if element["tag"] == "section":
                self._agent.pop()
            if element["tag"] == tag:
                break

    def handle_data(self, data):
        for element in self._open:
            element["text"] += data

    def find(self, agent=None, **attrs) -> list[dict]:
        return [
            e for e in self.elements
            if (agent is None or e["agent"] == agent) and all(e.get(k.replace("_", "-")) == v for k, v in attrs.items())
        ]


def _suite(root) -> None:
    (root / "lockstep.toml").write_text(f'[checks.test]\ncmd = "{sys.executable} -c pass"\n')


def test_report_of_three_agents(repo, coordinator, agents, tmp_path):
    _suite(repo.root)
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    assert cli("claim", "--agent", "bob", "src/app.py", cwd=repo.other).rc == 1  # refused: alice holds it
    assert cli("claim", "--agent", "bob", "src/b.py", cwd=repo.other).rc == 0
    carol = agents("carol", repo.root)
    assert carol.do("claim", paths=["src/c.py"])["type"] == "granted"
    assert carol.do("intent", paths=["src/app.py"])["verdict"] == "block"
    assert cli("check", "command", "--agent", "alice", "--", sys.executable, "-c", "pass", cwd=repo.root).rc == 0
    assert cli("verify", "--agent", "bob", cwd=repo.root).rc == 0
    carol.signal(signal.SIGKILL)
    wait_until(lambda: agent_state(repo, "carol") == "stale", timeout=10, what="carol to go stale")
    assert cli("release", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0

    page = tmp_path / "report.html"
    made = cli("report", "--html", str(page), "--json", cwd=repo.other)
    assert made.rc == 0, made
    assert made.json["agents"] == ["alice", "bob", "carol"] and made.json["refusals"] == 2
    html = Elements()
    html.feed(page.read_text())

    assert {e["data-agent"] for e in html.find(tag="section") if e.get("data-agent")} == {"alice", "bob", "carol"}
    held = html.find("alice", tag="tr", data_pattern="src/app.py")
    assert len(held) == 1 and held[0]["data-outcome"] == "released"
    refused_by = {e["data-by"] for e in html.elements if e.get("class") == "refusal" and e["agent"] == "alice"}
    assert refused_by == {"bob", "carol"}  # bob's claim and carol's write, both because of alice's claim
    assert html.find("bob", tag="tr", data_kind="claim.refused")  # bob's lane shows the refusal too
    assert html.find("carol", tag="tr", data_kind="intent.decided", data_verdict="block")
    assert html.find("alice", tag="tr", data_kind="check", data_outcome="pass")
    assert html.find("bob", tag="tr", data_kind="verify", data_outcome="pass")
    assert html.find("carol", tag="tr", data_kind="agent.stale")
    assert html.find("carol", tag="tr", data_pattern="src/c.py")[0]["data-outcome"] == "expired"
    assert html.find(tag="tr", data_kind="coordinator.started")
    assert page.read_text().count("<script") == 0 and "http" not in page.read_text().split("<body>")[1]  # self-contained

    later = cli("report", "--since", "2026-01-01T00:00", "--html", "-", cwd=repo.root)
    assert later.rc == 0 and later.out.startswith("<!DOCTYPE html>")
    bad = cli("report", "--since", "yesterday-ish", "--html", str(page), cwd=repo.root)
    assert bad.rc == 2 and bad.err.count("\n") == 1 and "--since" in bad.err


def test_where_names_the_state_dir_ledger_and_endpoints_from_a_linked_worktree(repo, coordinator):
    before = cli("where", "--json", cwd=repo.other)
    assert before.rc == 0 and before.json["running"] is False
    assert before.json["state_dir"] == str(repo.state_dir)  # not <linked worktree>/.git/lockstep: .git is a file there
    assert before.json["ledger"] == str(repo.state_dir / "ledger.db")
    served = coordinator(*FAST)
    after = cli("where", "--json", cwd=repo.other)
    state = json.loads((repo.state_dir / "coordinator.json").read_text())
    assert after.json["running"] is True and after.json["pid"] == served.pid and after.json["endpoints"] == state["endpoints"]
    text = cli("where", cwd=repo.other)
    assert text.rc == 0 and str(repo.state_dir / "ledger.db") in text.out


@pytest.mark.skipif(shutil.which("chromium") is None, reason="chromium is not installed (apt-get install chromium)")
def test_the_report_renders_in_headless_chromium(repo, tmp_path):
    from ledger import Ledger
    from ledger import records as rec
    from protocol.messages import Conflict

    repo.state_dir.mkdir(mode=0o700)
    with Ledger.open(repo.state_dir / "ledger.db") as led:
        led.append([rec.CoordinatorStarted(epoch=1, mode="parallel-strict")], epoch=1)
        led.append([rec.ClaimGranted(agent="alice", token=1, patterns=["src/a.py"], access="exclusive")], epoch=1)
        conflict = Conflict(holder="alice", pattern="src/a.py", access="exclusive", token=1)
        led.append([rec.ClaimRefused(agent="bob", patterns=["src/a.py"], reason="held", conflicts=[conflict])], epoch=1)
        led.append([rec.AgentStale(agent="carol", reason="no heartbeat for 9.0s")], epoch=1)
        led.append([rec.ClaimReleased(agent="alice", token=1, patterns=["src/a.py"], reason="done")], epoch=1)
    page = tmp_path / "report.html"
    assert cli("report", "--html", str(page), cwd=repo.root).rc == 0
    profile = tmp_path / "chromium-profile"
    rendered = subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert rendered.returncode == 0, rendered.stderr[-2000:]
    dom = Elements()
    dom.feed(rendered.stdout)
    assert {e["data-agent"] for e in dom.find(tag="section") if e.get("data-agent")} == {"alice", "bob", "carol"}
    assert [e["data-by"] for e in dom.elements if e.get("class") == "refusal"] == ["bob"]
    shot = tmp_path / "report.png"
    subprocess.run(
        ["chromium", "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={profile}", f"--screenshot={shot}",
         "--window-size=1200,900", page.as_uri()],
        capture_output=True, timeout=120,
    )
    assert shot.stat().st_size > 1000  # it painted something
