"""Rules over findings, end to end: two real local http services fail, a real coordinator
judges its scheduled cycle (or checks minutes apart) as one group, restarts them with
the configured commands (which bring them back), says once when no command is
configured, answers a standing finding once and says when it is resolved."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from .conftest import cli, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


def _service(up_file: Path) -> ThreadingHTTPServer:
    """A local service that answers 503 until ``up_file`` exists (its restart creates it)."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            self.send_response(200 if up_file.exists() else 503)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _ledger(repo, kind: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "1000", "--kind", kind, "--json", cwd=repo.root).out
    return [json.loads(line) for line in out.splitlines()]


def _url(server: ThreadingHTTPServer) -> str:
    return f"http://127.0.0.1:{server.server_port}/health"


def test_two_services_failing_in_one_scheduled_cycle_are_restarted_once_by_the_default_rule(repo, coordinator):
    servers = {name: _service(repo.root / f"up-{name}") for name in ("api", "web")}
    try:
        probes = "".join(
            f'[[probe]]\nname = "{name}"\nkind = "http"\nurl = "{_url(server)}"\nevery = "1s"\n'
            f'restart = "{sys.executable} -c \\"open(\'up-{name}\', \'w\')\\""\n\n'
            for name, server in servers.items()
        )
        (repo.root / "lockstep.toml").write_text(probes)
        coordinator(*FAST)
        wait_until(lambda: len(_ledger(repo, "rule.resolved")) >= 2, timeout=60, what="both services to come back")
        resolved = _ledger(repo, "rule.resolved")
        assert {tuple(e["data"]["probes"]) for e in resolved} == {("api",), ("web",)}
        assert {e["data"]["action"] for e in resolved} == {"restart"}
        responses = _ledger(repo, "rule.response")
        assert [r["data"]["action"] for r in responses] == ["restart"]  # one group, one restart, no notifies
        restart = responses[0]["data"]
        assert restart["reason"].startswith("default rule 1") and sorted(restart["probes"]) == ["api", "web"]
        assert restart["outcome"].count("exit 0") == 2, restart["outcome"]
        assert (repo.root / "up-api").exists() and (repo.root / "up-web").exists()
        passing = wait_until(lambda: [e for e in _ledger(repo, "probe.result") if e["data"]["verdict"] == "pass"], timeout=30)
        assert {e["data"]["name"] for e in passing} >= {"api", "web"}
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def test_checks_minutes_apart_count_within_the_window_and_no_command_is_said_once(repo, coordinator):
    servers = {name: _service(repo.root / f"up-{name}") for name in ("api", "web")}
    try:
        (repo.root / "lockstep.toml").write_text(
            '[[rule]]\nfinding = "endpoint failing"\nkind = "http"\nmin_failing = 2\nwithin = "5m"\nresponse = "restart"\n'
        )
        coordinator(*FAST)

        def check(name: str) -> dict:
            return cli("check", "http", _url(servers[name]), "--name", name, "--json", cwd=repo.root).json

        first = check("api")  # alone: the catch-all notifies
        assert first["verdict"] == "fail" and [r["action"] for r in first["responses"]] == ["notify"]
        second = check("web")  # the second within 5 minutes: the group rule, one restart
        (restart,) = second["responses"]
        assert restart["action"] == "restart" and sorted(restart["probes"]) == ["api", "web"]
        assert "no restart command configured for" in restart["outcome"] and "restart = " in restart["outcome"]
        assert "within 300s" in restart["reason"]
        assert check("web")["responses"] == [] and check("api")["responses"] == []  # standing: not again
        said = [e for e in _ledger(repo, "notice") if "no restart command" in e["data"]["message"]]
        assert len(said) == 1 and said[0]["data"]["operator"] is True

        (repo.root / "up-api").write_text("")  # the service is back
        back = check("api")
        assert back["verdict"] == "pass"
        resolved = _ledger(repo, "rule.resolved")
        assert sorted((e["data"]["action"], tuple(e["data"]["probes"])) for e in resolved) == [("notify", ("api",)), ("restart", ("api",))]
        assert any(e["data"]["message"] == "resolved: endpoint failing (api)" for e in _ledger(repo, "notice"))
        (repo.root / "up-api").unlink()  # down again while web still is: the group is answered again
        assert [r["action"] for r in check("api")["responses"]] == ["restart"]
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def test_a_window_counts_findings_from_before_a_coordinator_restart(repo, coordinator):
    servers = {name: _service(repo.root / f"up-{name}") for name in ("api", "web")}
    try:
        (repo.root / "lockstep.toml").write_text(
            '[[rule]]\nfinding = "endpoint failing"\nkind = "http"\nmin_failing = 2\nwithin = "5m"\nresponse = "restart"\n'
        )

        def check(name: str) -> dict:
            return cli("check", "http", _url(servers[name]), "--name", name, "--json", cwd=repo.root).json

        first = coordinator(*FAST)
        assert [r["action"] for r in check("api")["responses"]] == ["notify"]  # alone: the catch-all
        first.kill()  # SIGKILL: nothing is said or saved on the way out
        coordinator(*FAST)
        (restart,) = check("web")["responses"]  # api's finding, before the restart, still counts
        assert restart["action"] == "restart" and sorted(restart["probes"]) == ["api", "web"]
        assert "within 300s" in restart["reason"]
        decided = [e["data"] for e in _ledger(repo, "rule.decided")]
        assert [(d["action"], sorted(d["probes"])) for d in decided] == [("notify", ["api"]), ("restart", ["api", "web"])]
    finally:
        for server in servers.values():
            server.shutdown()
            server.server_close()


def test_a_rollback_with_no_command_restores_what_the_agents_last_passing_verify_saw(repo, coordinator):
    (repo.root / "lockstep.toml").write_text(f'[checks.test]\ncmd = "{sys.executable} -c pass"\n')
    (repo.root / "src" / "shared.py").write_text("shared = 1\n")
    (repo.root / "dist").mkdir()
    (repo.root / "dist" / "bundle-1.js").write_text("one")
    coordinator(*FAST)
    assert cli("check", "build", "dist", "--agent", "alice", cwd=repo.root).rc == 0
    passed = cli("verify", "--agent", "alice", "--json", cwd=repo.root).json
    assert passed["verdict"] == "pass" and passed["tree"]
    # alice goes on: changes a file, adds one, and changes one bob then claims
    (repo.root / "src" / "app.py").write_text("print('broken')\n")
    (repo.root / "src" / "new.py").write_text("new = 1\n")
    (repo.root / "src" / "shared.py").write_text("shared = 2\n")
    assert cli("claim", "src/shared.py", "--agent", "bob", cwd=repo.other).rc == 0
    # the build produces nothing new: default rule 2 rolls alice back
    checked = cli("check", "build", "dist", "--agent", "alice", "--json", cwd=repo.root).json
    (response,) = checked["responses"]
    assert response["action"] == "rollback" and response["reason"].startswith("default rule 2"), response
    assert (repo.root / "src" / "app.py").read_text() == "print('hi')\n"  # the content verify passed on
    assert not (repo.root / "src" / "new.py").exists()
    assert (repo.root / "src" / "shared.py").read_text() == "shared = 2\n"  # bob holds it: untouched
    assert "restored src/app.py" in response["outcome"] and "src/shared.py (held by bob)" in response["outcome"]
    (recorded,) = _ledger(repo, "rule.response")
    details = recorded["data"]["details"]
    assert details["tree"] == passed["tree"] and details["verify_job"] == passed["job"]
    assert (details["restored"], details["removed"], details["kept"]) == (["src/app.py"], ["src/new.py"], {"src/shared.py": "bob"})


class _Hook(BaseHTTPRequestHandler):
    received: list[dict] = []

    def do_POST(self):  # noqa: N802 - the http.server API
        self.received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


def test_operator_notices_go_to_the_desktop_and_the_webhook_once_per_change(repo, coordinator, tmp_path, monkeypatch):
    service = _service(repo.root / "up-api")
    hook = ThreadingHTTPServer(("127.0.0.1", 0), type("Hook", (_Hook,), {"received": []}))
    threading.Thread(target=hook.serve_forever, daemon=True).start()
    shown = tmp_path / "desktop.log"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "notify-send"  # stands in for the desktop: records what it was asked to show
    fake.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$*\" >> {shown}\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")
    try:
        (repo.root / "lockstep.toml").write_text(
            f'[notify]\ndesktop = true\nwebhook = "http://127.0.0.1:{hook.server_port}/lockstep"\n'
        )
        coordinator(*FAST)
        url = _url(service)
        for _ in range(2):  # failing twice: notified once
            assert cli("check", "http", url, "--name", "api", cwd=repo.root).rc == 1
        (repo.root / "up-api").write_text("")
        assert cli("check", "http", url, "--name", "api", cwd=repo.root).rc == 0

        def delivered():
            return len(hook.RequestHandlerClass.received) >= 2 and shown.exists() and len(shown.read_text().splitlines()) >= 2

        wait_until(delivered, timeout=20, what="both notices on both channels")
        messages = [m["message"] for m in hook.RequestHandlerClass.received]
        assert len(messages) == 2 and "endpoint failing" in messages[0] and messages[1] == "resolved: endpoint failing (api)"
        lines = shown.read_text().splitlines()
        assert len(lines) == 2 and lines[0].startswith("--app-name=lockstep lockstep ") and lines[1].endswith("resolved: endpoint failing (api)")
    finally:
        for server in (service, hook):
            server.shutdown()
            server.server_close()
