"""Deploy verification against a server that is not on 127.0.0.1, end to end: a real
coordinator, a real git repository, real http servers on 127.0.0.1, 127.0.0.2 (the
"remote" site, listed in [http] allow) and 127.0.0.3 (not listed).  The deploys the http
probe sees are recorded and a scheduled bundle probe finds a rollback."""

from __future__ import annotations

import hashlib
from http.server import ThreadingHTTPServer

import pytest

from ..http_site import self_signed, serve, stop
from .conftest import cli, wait_until

FAST = ("--heartbeat", "0.2", "--liveness", "5", "--lock-delay", "1")
V1, V2 = b"console.log('v1')\n", b"console.log('v2, a bigger bundle')\n"


@pytest.fixture
def site():
    """``site(host, routes)`` -> its base URL; every server is shut down afterwards."""
    servers: list[ThreadingHTTPServer] = []

    def start(host: str, routes: dict) -> str:
        server = serve(host, routes)
        servers.append(server)
        return f"http://{host}:{server.server_address[1]}"

    yield start
    for server in servers:
        stop(server)


def _deploys(repo) -> list[dict]:
    return [e["data"] for e in _events(repo, "deploy.seen")]


def _events(repo, kind: str) -> list[dict]:
    out = cli("ledger", "tail", "-n", "100", "--kind", kind, "--json", cwd=repo.root).out
    import json

    return [json.loads(line) for line in out.splitlines() if line.strip()]


def test_a_listed_remote_site_is_verified_its_deploys_recorded_and_a_rollback_found(repo, coordinator, site):
    remote: dict = {"/app.js": (200, {}, V1)}
    far = site("127.0.0.2", remote)  # the deployed site: listed
    unlisted = site("127.0.0.3", {"/app.js": (200, {}, V1)})  # up, but not listed
    local: dict = {"/health": (200, {}, b"ok"), "/to-site": (302, {"Location": f"{far}/app.js"}, b""),
                   "/elsewhere": (302, {"Location": f"{unlisted}/app.js"}, b"")}
    near = site("127.0.0.1", local)
    (repo.root / "dist").mkdir()
    (repo.root / "dist" / "app.js").write_bytes(V1)
    (repo.root / "lockstep.toml").write_text(
        f'[http]\nallow = ["{far}"]\n\n'
        f'[[probe]]\nname = "history"\nkind = "bundle"\nurl = "{far}/app.js"\nwindow = "1h"\nevery = "1s"\n\n'
        '[[rule]]\nfinding = "bundle rolled back"\nprobe = "history"\nresponse = "queue_task"\ntask = "roll the site forward"\n'
    )
    coordinator(*FAST)
    served = ("check", "http", f"{far}/app.js", "--expect-hash-of", "dist/app.js", "--json")

    # loopback needs no listing; the listed site is reached; an unlisted address is refused
    assert cli("check", "http", f"{near}/health", cwd=repo.root).rc == 0
    first = cli(*served, cwd=repo.root)
    assert first.rc == 0, first
    refused = cli("check", "http", f"{unlisted}/app.js", "--json", cwd=repo.root)
    assert refused.rc == 2 and "[http] allow" in refused.json["error"]["message"]
    assert f'add allow = ["{unlisted}"]' in refused.json["error"]["message"]
    # a redirect is followed to the listed site, not off the list
    assert cli("check", "http", f"{near}/to-site", "--contains", "v1", cwd=repo.root).rc == 0
    off = cli("check", "http", f"{near}/elsewhere", "--json", cwd=repo.root)
    assert off.rc == 1
    (result,) = off.json["results"]
    assert result["finding"] == "endpoint failing" and f"redirected to {unlisted}/app.js, which is not followed" in result["reason"]

    # built but not deployed: a mismatch, and no new deploy
    (repo.root / "dist" / "app.js").write_bytes(V2)
    stale = cli(*served, cwd=repo.root)
    assert stale.rc == 1 and stale.json["results"][0]["finding"] == "deploy hash mismatch"
    remote["/app.js"] = (200, {}, V2)  # deployed
    assert cli(*served, cwd=repo.root).rc == 0
    remote["/app.js"] = (200, {}, V1)  # the site goes back to the old bundle
    assert cli(*served, cwd=repo.root).rc == 1

    deploys = _deploys(repo)
    v1, v2 = hashlib.sha256(V1).hexdigest(), hashlib.sha256(V2).hexdigest()
    assert [(d["hash"], d["size"], d["previous"]) for d in deploys] == [(v1, len(V1), ""), (v2, len(V2), v1), (v1, len(V1), v2)]
    assert {d["url"] for d in deploys} == {f"{far}/app.js"} and {d["probe"] for d in deploys} == {"http"}

    # the scheduled bundle probe finds the rollback, and its rule queues one task
    tasks = wait_until(lambda: cli("tasks", "--json", cwd=repo.root).json["tasks"], timeout=30, what="the task")
    assert [(t["task"], t["because"]) for t in tasks] == [("roll the site forward", "bundle rolled back")]
    judged = cli("check", "bundle", "--url", f"{far}/app.js", "--max-size", str(len(V1)), "--json", cwd=repo.root)
    assert judged.rc == 1
    (bundle,) = judged.json["results"]
    assert bundle["finding"] == "bundle rolled back" and f"{far}/app.js served {v1[:12]}… again" in bundle["reason"]
    assert len(bundle["details"]["too_large"]) == 1 and "(and 1 more)" in bundle["reason"]  # v2 is over the budget


def test_the_history_survives_a_restart(repo, coordinator_in, site):
    remote: dict = {"/app.js": (200, {}, V1)}
    far = site("127.0.0.2", remote)
    (repo.root / "lockstep.toml").write_text(f'[http]\nallow = ["{far}/app.js"]\n')
    first = coordinator_in(repo, *FAST)
    for body in (V1, V2, V2, V1):  # V2 twice: one deploy
        remote["/app.js"] = (200, {}, body)
        assert cli("check", "http", f"{far}/app.js", "--deploy", cwd=repo.root).rc == 0
    assert len(_deploys(repo)) == 3
    text = cli("ledger", "tail", "--kind", "deploy.seen", cwd=repo.root).out  # the history, readable
    assert f"{far}/app.js {hashlib.sha256(V2).hexdigest()[:12]} ({len(V2)} bytes)" in text
    first.stop()
    coordinator_in(repo, *FAST)
    assert cli("check", "http", f"{far}/app.js", "--deploy", cwd=repo.root).rc == 0  # V1 still: nothing new
    assert len(_deploys(repo)) == 3
    judged = cli("check", "bundle", "--json", cwd=repo.root)
    assert judged.rc == 1 and judged.json["results"][0]["finding"] == "bundle rolled back"
    assert judged.json["results"][0]["details"]["newest"] == {f"{far}/app.js": hashlib.sha256(V2).hexdigest()}


def test_a_probe_on_an_unlisted_address_is_a_config_error(repo):
    (repo.root / "lockstep.toml").write_text('[[probe]]\nname = "site"\nkind = "http"\nurl = "http://127.0.0.3:8000/app.js"\n')
    refused = cli("serve", "--detach", "--json", *FAST, cwd=repo.root)
    assert refused.rc == 2
    message = refused.json["error"]["message"]
    assert "[[probe]] #1 key 'url'" in message and 'add allow = ["http://127.0.0.3:8000"]' in message
    assert not (repo.state_dir / "coordinator.json").exists()


def test_a_plans_own_probe_on_an_unlisted_address_fails_the_plan_before_any_step_runs(repo, coordinator):
    coordinator(*FAST)
    (repo.root / "PLAN.toml").write_text(
        '[plan]\nname = "ship"\n\n[[probe]]\nname = "site"\nkind = "http"\nurl = "http://127.0.0.3:8000/app.js"\n\n'
        '[[step]]\nid = "build"\nrun = "touch built"\npost = ["site"]\n'
    )
    ran = cli("plan", "run", "PLAN.toml", "--json", cwd=repo.root, timeout=60)
    assert ran.rc == 1, ran
    assert "[[probe]] #1 key 'url'" in ran.out and "127.0.0.3" in ran.out, ran.out
    assert not (repo.root / "built").exists()  # refused before the step ran


def test_tls_is_verified_and_the_configured_ca_is_trusted(repo, coordinator, tmp_path):
    import ssl

    servers = []
    try:
        urls = {}
        for name in ("trusted", "stranger"):
            cert, key = self_signed(tmp_path, name, "127.0.0.1")
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(cert, key)
            server = serve("127.0.0.1", {"/health": (200, {}, b"ok")}, context)
            servers.append(server)
            urls[name] = f"https://127.0.0.1:{server.server_address[1]}/health"
        (repo.root / "certs").mkdir()
        (repo.root / "certs" / "ca.pem").write_bytes((tmp_path / "trusted.pem").read_bytes())
        (repo.root / "lockstep.toml").write_text('[http]\nca = "certs/ca.pem"\n')
        coordinator(*FAST)
        assert cli("check", "http", urls["trusted"], cwd=repo.root).rc == 0
        stranger = cli("check", "http", urls["stranger"], "--json", cwd=repo.root)
        assert stranger.rc == 1
        (result,) = stranger.json["results"]
        assert result["finding"] == "endpoint failing" and "TLS verification failed" in result["reason"]
        assert "certificate" in result["reason"]
    finally:
        for server in servers:
            stop(server)
