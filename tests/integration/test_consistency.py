"""The consistency probe, end to end: three real local services and a file compared
with each other (no constant), from ``lockstep check`` and as a scheduled probe whose
finding goes through the rules."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from .conftest import cli, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")


def _replica(version: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - the http.server API
            body = json.dumps({"version": self.server.version}).encode()
            self.send_response(200)
            self.send_header("X-Build", self.server.version)
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.version = version
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def test_replicas_are_compared_with_each_other_and_the_odd_one_is_named(repo, coordinator):
    replicas = [_replica("2.4.1"), _replica("2.4.1"), _replica("2.4.0")]
    urls = [f"http://127.0.0.1:{r.server_port}/info" for r in replicas]
    try:
        (repo.root / "info.json").write_text('{"version": "2.4.1"}')
        (repo.root / "lockstep.toml").write_text(
            f'[[probe]]\nname = "same-version"\nkind = "consistency"\nsources = {json.dumps(urls)}\njson_path = "$.version"\nevery = "1s"\n\n'
            '[[rule]]\nfinding = "values disagree"\nprobe = "same-version"\nresponse = "queue_task"\ntask = "bring the replicas to one version"\n'
        )
        coordinator(*FAST)
        checked = cli("check", "consistency", *urls, "info.json", "--json-path", "$.version", "--json", cwd=repo.root)
        assert checked.rc == 1, checked
        (result,) = checked.json["results"]
        assert result["finding"] == "values disagree" and result["details"]["odd"] == [urls[2]]
        assert result["details"]["majority"] == "2.4.1" and f"{urls[2]}: '2.4.0'" in result["reason"]
        assert "1 of 4 sources disagree" in result["reason"]
        by_header = cli("check", "consistency", urls[0], urls[1], "--header", "X-Build", "--json", cwd=repo.root)
        assert by_header.rc == 0 and by_header.json["results"][0]["details"]["majority"] == "2.4.1"
        assert cli("check", "consistency", urls[0], "--json", cwd=repo.root).rc == 2  # one source compares nothing
        assert cli("check", "consistency", "info.json", "info.json", "--header", "X-Build", cwd=repo.root).rc == 2
        # the scheduled probe finds it too, and its rule queues one task, once
        tasks = wait_until(lambda: cli("tasks", "--json", cwd=repo.root).json["tasks"], timeout=30, what="the task")
        assert [(t["task"], t["because"]) for t in tasks] == [("bring the replicas to one version", "values disagree")]
        replicas[2].version = "2.4.1"  # brought in line: the next cycle resolves it
        wait_until(lambda: cli("ledger", "tail", "--kind", "rule.resolved", "--json", cwd=repo.root).out.strip(), timeout=30, what="resolution")
        assert len(cli("tasks", "--all", "--json", cwd=repo.root).json["tasks"]) == 1
    finally:
        for replica in replicas:
            replica.shutdown()
            replica.server_close()


def test_the_served_deploy_hash_is_compared_with_the_local_artifact(repo, coordinator):
    import hashlib

    dist = repo.root / "dist"
    dist.mkdir()
    (dist / "app.js").write_text("console.log('v2')\n")
    served = _replica(hashlib.sha256(b"console.log('v2')\n").hexdigest())  # serves {"version": <hash>}
    try:
        coordinator(*FAST)
        url = f"http://127.0.0.1:{served.server_port}/deploy_info"
        args = ("check", "http", url, "--json-path", "$.version", "--expect-hash-of", "dist/app.js", "--json")
        assert cli(*args, cwd=repo.root).rc == 0
        served.version = served.version[:12]  # a short hash is fine
        assert cli(*args, cwd=repo.root).rc == 0
        (dist / "app.js").write_text("console.log('v3')\n")  # built again, not deployed
        stale = cli(*args, cwd=repo.root)
        assert stale.rc == 1
        (result,) = stale.json["results"]
        assert result["finding"] == "deploy hash mismatch" and "dist/app.js has sha256" in result["reason"]
        assert result["details"]["expected_hash"] == hashlib.sha256(b"console.log('v3')\n").hexdigest()
        assert [r["action"] for r in stale.json["responses"]] == ["notify"]
    finally:
        served.shutdown()
        served.server_close()
