"""Agents on other hosts: claims over CURVE from another network namespace.

    python bench/bench_remote.py            # about a minute on 2 cores
    python bench/bench_remote.py --quick
    python bench/bench_remote.py --quick --fsync process-crash

The coordinator serves with ``--curve``, so its durability is ``power-loss`` (every
batch fsynced before its replies leave) unless ``--fsync process-crash`` is passed on.

Needs root and ``ip`` (it builds two network namespaces joined by a veth pair, as the
tests do, and removes them); without them it says so and exits 0.  Figures:

1. **Claim round trip over CURVE** from the agent's namespace, serial, each claim a new
   grant (p50, p99), against a raw pyzmq CURVE echo (a ROUTER that sends each frame
   back) over the same link with the same frames.  Target: ≤ 2× at p50 and p99.  The
   samples alternate in blocks of 50 (50 claims, 50 echoes, 50 fsync'd echoes, ...),
   so a change of the machine's load hits all three alike.  For scale, the physical floor of a durable
   answer: the fsync'd echo appends each frame to a file and ``fdatasync``s it before
   sending it back (what one power-loss-durable commit costs at least; the
   coordinator's ledger is on the same disk).
2. **Grants/s from 100 remote agents**, each its own enrolled key and DEALER, 4 claims
   in flight each, distinct paths.  Target: ≥ 10,000/s.  Baseline: the same load
   generator, the same frames and keys, against the raw CURVE echo (messages/s): what
   this load generator and CURVE reach on the machine at that moment.  For scale, the
   same load from 100 agents on the coordinator's host over its ipc socket (no CURVE,
   no link): what the coordinator itself reaches at that moment.

Also for scale, measured in the bench's own process on the same disk: a one-grant
ledger commit with power-loss durability (``synchronous=FULL``: what ``serve --curve``
does per batch) against a bare append + ``fdatasync``, in blocks of 50.

It is a benchmark, not a test: it exits 0 whether or not a target is met.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable
AGENTS = 100
IN_FLIGHT = 4
SERIAL_BLOCK = 50  # serial samples per server in turn: back to back within a block, all three alike across


# ----------------------------------------------------------------- inside the agent's namespace


def _dealer(ctx, endpoint: str, server_key: str, public: str, secret: str):
    import zmq

    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.CURVE_SERVERKEY, server_key.encode())
    sock.setsockopt(zmq.CURVE_PUBLICKEY, public.encode())
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret.encode())
    sock.connect(endpoint)
    return sock


def _ask(sock, message):
    from protocol.codec import decode_reply, encode

    sock.send(encode(message))
    return decode_reply(sock.recv())


def client(spec: dict) -> dict:
    """Runs in the agent's namespace: enroll, then measure; prints JSON."""
    import zmq

    from protocol import messages as m
    from protocol.codec import decode_reply, encode

    ctx = zmq.Context()
    keys = []
    for name, token_secret in spec["invites"]:
        from protocol.curve import public_of

        enroll = _dealer(ctx, spec["endpoint"], spec["server_key"], public_of(token_secret.encode()).decode(), token_secret)
        public, secret = zmq.curve_keypair()
        reply = _ask(enroll, m.Enroll(key=public.decode(), roots=spec["roots"], host="bench"))
        assert isinstance(reply, m.Enrolled), reply
        enroll.close()
        keys.append((name, public.decode(), secret.decode()))
    socks, sessions = [], []
    for name, public, secret in keys:
        sock = _dealer(ctx, spec["endpoint"], spec["server_key"], public, secret)
        welcome = _ask(sock, m.Hello(agent=name, repo="bench", host="bench"))
        socks.append(sock)
        sessions.append(welcome.session)
    out = {}
    # 1. serial round trips, alternating: a lockstep claim, the same frame to the echo
    # server, the same frame to the fsync'd echo server
    n = spec["serial"]
    frames = [encode(m.Claim(req=i + 1, session=sessions[0], paths=[f"serial/{spec['run']}/{i}.py"])) for i in range(n)]
    echo = _dealer(ctx, spec["echo"], spec["echo_key"], *keys[0][1:])
    durable_echo = _dealer(ctx, spec["echo_fsync"], spec["echo_key"], *keys[0][1:])
    times, echo_times, durable_times = [], [], []
    for block in range(0, n, SERIAL_BLOCK):
        for frame in frames[block:block + SERIAL_BLOCK]:
            t = time.perf_counter()
            socks[0].send(frame)
            reply = decode_reply(socks[0].recv())
            times.append(time.perf_counter() - t)
            assert isinstance(reply, m.Granted), reply
        for sock, samples in ((echo, echo_times), (durable_echo, durable_times)):
            for frame in frames[block:block + SERIAL_BLOCK]:
                t = time.perf_counter()
                sock.send(frame)
                sock.recv()
                samples.append(time.perf_counter() - t)
    out["claim_rtt"] = _percentiles(times)
    out["echo_rtt"] = _percentiles(echo_times)
    out["echo_fsync_rtt"] = _percentiles(durable_times)
    # 2. grants/s: every agent keeps IN_FLIGHT claims going, distinct paths; then the
    # same load generator, frames and keys against the raw CURVE echo
    per_agent = spec["per_agent"]
    load = [[encode(m.Claim(req=k + 1, session=sessions[i], paths=[f"load/{spec['run']}/{i}/{k}.py"])) for k in range(per_agent)]
            for i in range(len(socks))]
    out["grants_per_s"], out["load_refused"] = _keep_in_flight(socks, load, decode_reply, m.Granted)
    out["load_total"] = per_agent * len(socks)
    echoes = [_dealer(ctx, spec["echo"], spec["echo_key"], public, secret) for _, public, secret in keys]
    for sock in echoes:  # connected and through the handshake before the clock starts
        sock.send(b"hi")
        sock.recv()
    out["echo_per_s"], _ = _keep_in_flight(echoes, load, None, None)
    for sock in [*socks, echo, durable_echo, *echoes]:
        sock.close()
    ctx.term()
    return out


def _keep_in_flight(socks: list, load: list[list[bytes]], decode, wanted) -> tuple[float, int]:
    """Send ``load[i]`` on ``socks[i]`` with IN_FLIGHT requests outstanding per socket;
    (replies/s, replies that were not ``wanted``).  ``decode`` None: count replies only."""
    import zmq

    poller = zmq.Poller()
    for sock in socks:
        poller.register(sock, zmq.POLLIN)
    sent = [0] * len(socks)
    index = {sock: i for i, sock in enumerate(socks)}
    per_socket = len(load[0])

    def send(i: int) -> None:
        socks[i].send(load[i][sent[i]])
        sent[i] += 1

    start = time.perf_counter()
    for i in range(len(socks)):
        for _ in range(IN_FLIGHT):
            send(i)
    total = per_socket * len(socks)
    done = refused = 0
    while done < total:
        for sock, _ in poller.poll(10_000):
            i = index[sock]
            while True:
                try:
                    frame = sock.recv(zmq.NOBLOCK)
                except zmq.Again:
                    break
                done += 1
                if decode is not None:
                    refused += not isinstance(decode(frame), wanted)
                if sent[i] < per_socket:
                    send(i)
    return total / (time.perf_counter() - start), refused


def _percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"p50_ms": statistics.median(ordered) * 1000, "p99_ms": ordered[int(len(ordered) * 0.99) - 1] * 1000, "n": len(ordered)}


def echo_server(endpoint: str, secret: str, fsync_to: str | None = None) -> None:
    """A raw pyzmq CURVE ROUTER that sends every frame back (no ZAP: any client key).
    With ``fsync_to``: first appends the frame to that file and ``fdatasync``s it."""
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.CURVE_SERVER, 1)
    sock.setsockopt(zmq.CURVE_SECRETKEY, secret.encode())
    sock.bind(endpoint)
    if fsync_to is None:
        while True:
            sock.send_multipart(sock.recv_multipart())
    fd = os.open(fsync_to, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    while True:
        frames = sock.recv_multipart()
        os.write(fd, frames[-1])
        os.fdatasync(fd)
        sock.send_multipart(frames)


# ----------------------------------------------------------------- the orchestration


def main() -> int:
    quick = "--quick" in sys.argv
    fsync = sys.argv[sys.argv.index("--fsync") + 1] if "--fsync" in sys.argv else None
    from tests.integration.netns import Hosts, skip_reason

    why = skip_reason()
    if why is not None:
        print(f"bench_remote: not run: {why}")
        return 0
    import zmq

    print(f"bench_remote: {' '.join(sys.argv)}; load average {os.getloadavg()}")
    hosts = Hosts(["coord", "a"]).build()
    procs: list[subprocess.Popen] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tmp = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    try:
        repo = tmp / "repo"
        repo.mkdir()
        for args in (["init", "-q", "-b", "main"], ["-c", "user.email=b@e", "-c", "user.name=b", "commit", "-q", "--allow-empty", "-m", "root"]):
            subprocess.run(["git", *args], cwd=repo, check=True)
        endpoint = f"tcp://{hosts.address['coord']}:7400"
        serve = subprocess.Popen(
            [*hosts.prefix("coord"), PY, "-m", "agents.cli", "serve", "--endpoint", endpoint, "--curve", "--heartbeat", "30", "--liveness", "100",
             *(["--fsync", fsync] if fsync else [])],
            cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        procs.append(serve)
        state = repo / ".git" / "lockstep" / "coordinator.json"
        deadline = time.monotonic() + 30
        while not (state.exists() and json.loads(state.read_text() or "{}").get("pid") == serve.pid):
            if time.monotonic() > deadline:
                raise SystemExit("the coordinator did not start")
            time.sleep(0.05)
        info = json.loads(state.read_text())
        from agents.oneshot import open_connection
        from protocol import messages as m
        from protocol.curve import read_token, root_commits

        invites = []
        with open_connection(info["endpoints"][0], timeout=10) as conn:
            for i in range(AGENTS):
                token = conn.request(m.Keys(op="invite", name=f"remote{i}")).token
                invites.append((f"remote{i}", read_token(token)["secret"].decode()))
        echo_public, echo_secret = zmq.curve_keypair()
        echo_endpoint = f"tcp://{hosts.address['coord']}:7500"
        echo_fsync_endpoint = f"tcp://{hosts.address['coord']}:7501"
        for where, durable in ((echo_endpoint, []), (echo_fsync_endpoint, [str(tmp / "echo-fsync.log")])):
            procs.append(subprocess.Popen(
                [*hosts.prefix("coord"), PY, str(Path(__file__).resolve()), "--echo", where, echo_secret.decode(), *durable], env=env,
            ))
        spec = {
            "endpoint": endpoint, "server_key": info["curve_public"], "invites": invites, "roots": root_commits(repo),
            "echo": echo_endpoint, "echo_fsync": echo_fsync_endpoint, "echo_key": echo_public.decode(), "serial": 500 if quick else 2000,
            "per_agent": 100 if quick else 400, "run": 0,
        }
        runs = []
        for run in range(1 if quick else 3):
            spec["run"] = run
            spec["invites"] = invites if run == 0 else []
            result = subprocess.run(
                [*hosts.prefix("a"), PY, str(Path(__file__).resolve()), "--client"], input=json.dumps(spec if run == 0 else {**spec, "invites": invites_again(info, run)}),
                env=env, capture_output=True, text=True, timeout=600,
            )
            if result.returncode != 0:
                raise SystemExit(f"client failed: {result.stderr}")
            runs.append(json.loads(result.stdout))
            print(f"run {run}: {runs[-1]}")
        local = local_claims(info, spec["serial"])
        print(f"local ipc claims: {local}")
        local_rate = local_load(info, spec["per_agent"])
        print(f"local ipc grants/s: {local_rate:,.0f}")
        commit, append = commits_alone(tmp, 500)
        print(f"commits alone: ledger {commit}, append + fdatasync {append}")
        claim50 = statistics.median(r["claim_rtt"]["p50_ms"] for r in runs)
        claim99 = statistics.median(r["claim_rtt"]["p99_ms"] for r in runs)
        echo50 = statistics.median(r["echo_rtt"]["p50_ms"] for r in runs)
        echo99 = statistics.median(r["echo_rtt"]["p99_ms"] for r in runs)
        durable50 = statistics.median(r["echo_fsync_rtt"]["p50_ms"] for r in runs)
        durable99 = statistics.median(r["echo_fsync_rtt"]["p99_ms"] for r in runs)
        rate = statistics.median(r["grants_per_s"] for r in runs)
        echo_rate = statistics.median(r["echo_per_s"] for r in runs)
        print()
        print("| figure | measured | baseline | ratio | target | met |")
        print("|---|---|---|---|---|---|")
        print(f"| claim round trip over CURVE, p50 | {claim50:.3f} ms | CURVE echo {echo50:.3f} ms | {claim50 / echo50:.2f}× | ≤ 2× | {claim50 / echo50 <= 2} |")
        print(f"| claim round trip over CURVE, p99 | {claim99:.3f} ms | CURVE echo {echo99:.3f} ms | {claim99 / echo99:.2f}× | ≤ 2× | {claim99 / echo99 <= 2} |")
        print(f"| (the floor of a durable answer) the same, p50 / p99 | | CURVE echo + fdatasync {durable50:.3f} / {durable99:.3f} ms | "
              f"{claim50 / durable50:.2f}× / {claim99 / durable99:.2f}× | | |")
        print(f"| (for scale) the same claims from the coordinator's host over ipc, p50 / p99 | {local['p50_ms']:.3f} / {local['p99_ms']:.3f} ms | | | | |")
        print(f"| (for scale) one-grant ledger commit with power-loss durability alone, p50 / p99 | {commit['p50_ms']:.3f} / "
              f"{commit['p99_ms']:.3f} ms | append + fdatasync {append['p50_ms']:.3f} / {append['p99_ms']:.3f} ms | "
              f"{commit['p50_ms'] / append['p50_ms']:.2f}× / {commit['p99_ms'] / append['p99_ms']:.2f}× | | |")
        print(f"| grants/s, {AGENTS} remote agents × {IN_FLIGHT} in flight | {rate:,.0f}/s | CURVE echo {echo_rate:,.0f}/s | "
              f"{rate / echo_rate:.2f}× | ≥ 10,000/s | {rate >= 10_000} |")
        print(f"| (for scale) the same load from {AGENTS} agents on the coordinator's host over ipc | {local_rate:,.0f}/s | | "
              f"remote {rate / local_rate:.2f}× | | |")
        print(f"durability {fsync or 'power-loss (the default with --curve)'}; load average at the end {os.getloadavg()}")
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        hosts.close()
        subprocess.run(["rm", "-rf", str(tmp)])
    return 0


def local_claims(info: dict, n: int) -> dict:
    """Serial claims from the coordinator's host over its ipc socket: what a claim costs
    without CURVE and without the link."""
    from agents.oneshot import open_connection
    from protocol import messages as m

    times = []
    with open_connection(info["endpoints"][0], timeout=10) as conn:
        session = conn.request(m.Hello(agent="local-bench", repo=info["repo"])).session
        for i in range(n):
            t = time.perf_counter()
            conn.request(m.Claim(session=session, paths=[f"local/{i}.py"]))
            times.append(time.perf_counter() - t)
    return _percentiles(times)


def local_load(info: dict, per_agent: int) -> float:
    """Grants/s from AGENTS agents on the coordinator's host over its ipc socket, with
    the same load generator: what the coordinator reaches without CURVE and the link."""
    import zmq

    from protocol import messages as m
    from protocol.codec import decode_reply, encode

    ctx = zmq.Context()
    socks, load = [], []
    for i in range(AGENTS):
        sock = ctx.socket(zmq.DEALER)
        sock.setsockopt(zmq.LINGER, 0)
        sock.connect(info["endpoints"][0])
        sock.send(encode(m.Hello(agent=f"local{i}", repo=info["repo"])))
        session = decode_reply(sock.recv()).session
        socks.append(sock)
        load.append([encode(m.Claim(req=k + 1, session=session, paths=[f"local-load/{i}/{k}.py"])) for k in range(per_agent)])
    rate, refused = _keep_in_flight(socks, load, decode_reply, m.Granted)
    assert refused == 0, refused
    for sock in socks:
        sock.close()
    ctx.term()
    return rate


def commits_alone(where: Path, n: int) -> tuple[dict, dict]:
    """In this process, on the coordinator's disk: one-grant ledger commits with
    power-loss durability (``synchronous=FULL``, what ``serve --curve`` does per batch)
    against a bare append + ``fdatasync`` (what the fsync'd echo does), in blocks."""
    from ledger import Ledger
    from ledger.records import ClaimGranted

    ledger = Ledger.open(where / "commits-alone.db", fsync_every_commit=True)
    fd = os.open(where / "commits-alone.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    commits, appends = [], []
    try:
        for block in range(0, n, SERIAL_BLOCK):
            for i in range(block, block + SERIAL_BLOCK):
                t = time.perf_counter()
                ledger.append([ClaimGranted(agent="a", session="s", token=i + 1, patterns=[f"alone/{i}.py"])], epoch=1)
                commits.append(time.perf_counter() - t)
            for i in range(block, block + SERIAL_BLOCK):
                t = time.perf_counter()
                os.write(fd, b"%d" % i * 20)
                os.fdatasync(fd)
                appends.append(time.perf_counter() - t)
    finally:
        ledger.close()
        os.close(fd)
    return _percentiles(commits), _percentiles(appends)


def invites_again(info: dict, run: int) -> list:
    """Fresh agent names for a later run (each run enrolls its own keys)."""
    from agents.oneshot import open_connection
    from protocol import messages as m
    from protocol.curve import read_token

    out = []
    with open_connection(info["endpoints"][0], timeout=10) as conn:
        for i in range(AGENTS):
            name = f"remote{run}x{i}"
            out.append((name, read_token(conn.request(m.Keys(op="invite", name=name)).token)["secret"].decode()))
    return out


if __name__ == "__main__":
    if "--client" in sys.argv:
        print(json.dumps(client(json.load(sys.stdin))))
    elif "--echo" in sys.argv:
        echo_server(sys.argv[2], sys.argv[3], *sys.argv[4:5])
    else:
        sys.exit(main())
