"""Probe dispatch to a remote agent's worker against the coordinator's own probe pool.

    python bench/bench_remote_probes.py            # a minute or two on 2 cores
    python bench/bench_remote_probes.py --quick

Needs root and ``ip`` (two network namespaces joined by a veth pair, as the tests
build; removed at the end); without them it says so and exits 0.  The probe is a cheap
one (``write``: hash a 1 KiB file and compare), so what is measured is the way there
and back, not the check.

1. **Dispatch overhead** (the target).  In the coordinator's namespace, the
   coordinator's own parts: a CURVE ROUTER feeding a ``WorkerBroker`` (what
   ``lockstep serve`` runs) and a warm ``ProbePool``; in the other namespace, a real
   ``lockstep worker`` in a clone, connected over CURVE across the link.  Alternating,
   the same probe runs through ``pool.run`` (local) and ``broker.run`` (to the worker
   and back: encode, CURVE, the worker's own warm pool, the result back), and an empty
   work (no probe: the way there and back alone).  Target: the remote p50 ≤ 2 ms over
   the local pool's.
2. **The whole path, for scale.**  A real ``lockstep serve --curve``; a clone joined as
   ``alice`` runs ``lockstep worker`` and ``lockstep run --agent alice -- sleep``.  A
   client on the coordinator's host asks for the check, alternating with no session in
   the coordinator's worktree (the local pool) and in alice's session in her clone (her
   worker), and times ``check`` → its ``job.finished`` publication.  Both include the
   same ledger work (three commits, fsynced: ``--curve`` makes power-loss durability the
   default); the local one also locates the worktree (one ``git rev-parse``), which the
   worker does not need.

It is a benchmark, not a test: it exits 0 whether or not the target is met.
"""

from __future__ import annotations

import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import trio

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
PY = sys.executable


def _percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    return {"p50_ms": statistics.median(ordered) * 1000, "p99_ms": ordered[max(0, int(len(ordered) * 0.99) - 1)] * 1000, "n": len(ordered)}


def _wait(predicate, what: str, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise SystemExit(f"bench_remote_probes: timed out waiting for {what}")
        time.sleep(0.05)


# ----------------------------------------------------------------- 1. the broker's side, in the coordinator's namespace


def broker_side(spec: dict) -> dict:
    """A CURVE ROUTER + ``WorkerBroker`` + a local pool; alternate local and remote runs."""
    return trio.run(_broker_side, spec)


async def _broker_side(spec: dict) -> dict:
    import zmq

    from coordinator.workers import WorkerBroker, work_for
    from probes.model import ProbeSpec
    from probes.pool import open_probe_pool
    from protocol.codec import decode_request, encode
    from protocol.trio_zmq import TrioSocket

    ctx = zmq.Context()
    raw = ctx.socket(zmq.ROUTER)
    raw.setsockopt(zmq.LINGER, 0)
    raw.setsockopt(zmq.CURVE_SERVER, 1)  # no ZAP handler here: any client key gets in
    raw.setsockopt(zmq.CURVE_SECRETKEY, spec["secret"].encode())
    raw.bind(spec["endpoint"])
    router = TrioSocket(raw)
    broker = WorkerBroker(lambda peer, frame: router.send_multipart_nowait([peer, frame]), heartbeat=1.0, liveness=30)

    def probe(where: str) -> ProbeSpec:
        return ProbeSpec(name="bench-write", kind="write", params={"path": f"{where}/artifact.bin", "sha256": spec["sha256"]}, cwd=where)

    async def progress(message) -> None:
        pass

    samples: dict[str, list[float]] = {"local": [], "remote": [], "empty": []}
    async with open_probe_pool() as pool, trio.open_nursery() as nursery:
        async def serve() -> None:
            while True:
                frames = await router.recv_multipart()
                for effect in broker.receive(frames[0], "alice", decode_request(frames[-1]), trio.current_time()):
                    router.send_multipart_nowait([effect.peer, encode(effect.message)])

        async def beat() -> None:
            while True:
                await trio.sleep(1.0)
                broker.beat(trio.current_time())

        nursery.start_soon(serve)
        nursery.start_soon(beat)
        with trio.fail_after(60):
            while not broker.has_worker("alice"):
                await trio.sleep(0.05)
        await pool.warm_up()
        count = 0

        async def one(kind: str) -> float:
            nonlocal count
            count += 1
            started = time.perf_counter()
            if kind == "local":
                result = await pool.run(probe(spec["local"]))
            elif kind == "empty":  # the way there and back alone: no probe to run
                done = await broker.run("alice", work_for(f"b{count}", "suite", cwd=spec["remote"]), progress)
                result = None
            else:
                done = await broker.run("alice", work_for(f"b{count}", "suite", specs=[probe(spec["remote"])], cwd=spec["remote"]), progress)
                assert not done.error, done.error
                result = None
            elapsed = time.perf_counter() - started
            assert result is None or result.passed, result
            return elapsed

        for _ in range(20):  # warm both paths
            await one("local")
            await one("remote")
        for _ in range(spec["runs"]):
            for kind in ("local", "remote", "empty"):
                samples[kind].append(await one(kind))
        nursery.cancel_scope.cancel()
    router.close()
    ctx.term()
    return {kind: _percentiles(values) for kind, values in samples.items()}


def dispatch_overhead(hosts, tmp: Path, repo: Path, env: dict, quick: bool, procs: list) -> dict:
    """Part 1: a real worker in a clone on host a, the broker and a pool on coord."""
    import zmq

    from protocol import curve

    clone = tmp / "clone-dispatch"
    subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
    server_public, server_secret = zmq.curve_keypair()
    public, secret = zmq.curve_keypair()
    endpoint = f"tcp://{hosts.address['coord']}:7600"
    state = clone / ".git" / "lockstep"
    state.mkdir(mode=0o700)
    curve.write_private(state / curve.REMOTE_FILE, {
        "agent": "alice", "endpoints": [endpoint], "pub": [], "server_key": server_public.decode(),
        "public": public.decode(), "secret": secret.decode(),
    })
    payload = (repo / "artifact.bin").read_bytes()
    spec = {"endpoint": endpoint, "secret": server_secret.decode(), "sha256": hashlib.sha256(payload).hexdigest(),
            "local": str(repo), "remote": str(clone), "runs": 300 if quick else 1000}
    broker = subprocess.Popen([*hosts.prefix("coord"), PY, str(Path(__file__).resolve()), "--broker"], env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    procs.append(broker)
    broker.stdin.write(json.dumps(spec))
    broker.stdin.close()
    worker = subprocess.Popen([*hosts.prefix("a"), PY, "-m", "agents.cli", "worker"], cwd=clone, env=env, stderr=subprocess.DEVNULL)
    procs.append(worker)
    out = broker.stdout.read()
    if broker.wait(600) != 0:
        raise SystemExit("bench_remote_probes: the broker side failed")
    return json.loads(out)


# ----------------------------------------------------------------- the orchestration


def main() -> int:
    quick = "--quick" in sys.argv
    from tests.integration.netns import Hosts, skip_reason

    why = skip_reason()
    if why is not None:
        print(f"bench_remote_probes: not run: {why}")
        return 0
    import zmq

    from agents.oneshot import open_connection
    from protocol import messages as m
    from protocol.codec import decode_publication

    print(f"bench_remote_probes: {' '.join(sys.argv)}; load average {os.getloadavg()}")
    hosts = Hosts(["coord", "a"]).build()
    procs: list[subprocess.Popen] = []
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    tmp = Path(tempfile.mkdtemp(prefix="bench-remote-probes-"))
    lockstep = [PY, "-m", "agents.cli"]
    try:
        repo = tmp / "repo"
        repo.mkdir()
        payload = os.urandom(1024)
        (repo / "artifact.bin").write_bytes(payload)
        for args in (["init", "-q", "-b", "main"], ["add", "artifact.bin"],
                     ["-c", "user.email=b@e", "-c", "user.name=b", "commit", "-q", "-m", "root"]):
            subprocess.run(["git", *args], cwd=repo, check=True)
        part1 = dispatch_overhead(hosts, tmp, repo, env, quick, procs)
        print(f"1. dispatch: {part1}")
        clone = tmp / "clone"
        subprocess.run(["git", "clone", "-q", str(repo), str(clone)], check=True)
        endpoint = f"tcp://{hosts.address['coord']}:7400"
        procs.append(subprocess.Popen(
            [*hosts.prefix("coord"), *lockstep, "serve", "--endpoint", endpoint, "--curve", "--heartbeat", "1", "--liveness", "10"],
            cwd=repo, env=env, stdout=subprocess.DEVNULL, stderr=open(tmp / "serve.err", "w"),
        ))
        serve = procs[-1]
        state = repo / ".git" / "lockstep" / "coordinator.json"

        def serving() -> bool:
            if serve.poll() is not None:
                raise SystemExit(f"bench_remote_probes: the coordinator exited: {(tmp / 'serve.err').read_text()}")
            return state.exists() and json.loads(state.read_text() or "{}").get("pid") == serve.pid

        _wait(serving, "the coordinator", timeout=60)
        info = json.loads(state.read_text())

        def cli(host: str, *args: str, cwd: Path) -> dict:
            out = subprocess.run([*hosts.prefix(host), *lockstep, *args, "--json"], cwd=cwd, env=env, capture_output=True, text=True, timeout=60)
            if out.returncode != 0:
                raise SystemExit(f"bench_remote_probes: {args[0]} failed: {out.stdout} {out.stderr}")
            return json.loads(out.stdout)

        token = cli("coord", "invite", "alice", cwd=repo)["token"]
        cli("a", "join", token, "--no-worker", cwd=clone)
        procs.append(subprocess.Popen([*hosts.prefix("a"), *lockstep, "worker"], cwd=clone, env=env, stderr=subprocess.DEVNULL))

        with open_connection(info["endpoints"][0], timeout=30) as conn:
            def status() -> m.StatusReply:
                return conn.request(m.Status())

            _wait(lambda: [w["agent"] for w in status().statistics.get("workers", {}).get("workers", [])] == ["alice"], "alice's worker")
            # alice's live session is on host a (`run` finds the worker running and starts none)
            procs.append(subprocess.Popen([*hosts.prefix("a"), *lockstep, "run", "--agent", "alice", "--", "sleep", "3600"], cwd=clone,
                                          env=env, stderr=subprocess.DEVNULL))
            _wait(lambda: any(a.name == "alice" and a.state == "alive" for a in status().agents), "alice's session")
            session = next(a.session for a in status().agents if a.name == "alice" and a.state == "alive")
            ctx = zmq.Context.instance()
            sub = ctx.socket(zmq.SUB)
            sub.setsockopt(zmq.SUBSCRIBE, b"job.finished")
            sub.connect(info["pub"][0])
            time.sleep(0.3)  # the subscription reaches the PUB socket (a slow joiner would miss the first)
            digest = hashlib.sha256(payload).hexdigest()
            def probe(where: Path) -> m.ProbeRequest:
                return m.ProbeRequest(kind="write", name="bench-write", params={"path": str(where / "artifact.bin"), "sha256": digest})

            asks = {
                "local": m.Check(probe=probe(repo), cwd=str(repo)),
                "remote": m.Check(probe=probe(clone), cwd=str(clone), session=session),
            }

            def one(kind: str) -> float:
                started = time.perf_counter()
                job = conn.request(asks[kind]).job
                while True:
                    _, frame = sub.recv_multipart()
                    publication = decode_publication(frame)
                    if publication.data.get("job") == job:
                        if publication.data.get("verdict") != "pass":
                            raise SystemExit(f"bench_remote_probes: the {kind} check failed: {publication.data.get('reason')}")
                        return time.perf_counter() - started

            for kind in ("local", "remote") * 10:  # warm both pools and paths
                one(kind)
            runs = 100 if quick else 400
            samples: dict[str, list[float]] = {"local": [], "remote": []}
            for _ in range(runs):
                for kind in ("local", "remote"):
                    samples[kind].append(one(kind))
            sub.close()
        local, remote = _percentiles(samples["local"]), _percentiles(samples["remote"])
        print(f"2. whole path: local pool {local}, remote worker {remote}")
        print()
        print("| figure | local pool | remote worker | added | target | met |")
        print("|---|---|---|---|---|---|")
        rows = [("1. probe dispatch (pool.run / broker.run → worker → back)", part1["local"], part1["remote"], True),
                ("2. whole path: `check` → `job.finished`", local, remote, False)]
        empty = part1["empty"]
        print(f"| 1. of which the way there and back alone (an empty work: no probe), p50 / p99 | | {empty['p50_ms']:.2f} / "
              f"{empty['p99_ms']:.2f} ms | | | |")
        for label, here, there, targeted in rows:
            for p in ("p50", "p99"):
                added = there[f"{p}_ms"] - here[f"{p}_ms"]
                met = (added <= 2) if targeted and p == "p50" else "(for scale)" if not targeted else "(p50 only)"
                print(f"| {label}, {p} | {here[f'{p}_ms']:.2f} ms | {there[f'{p}_ms']:.2f} ms | {added:+.2f} ms "
                      f"({there[f'{p}_ms'] / here[f'{p}_ms']:.2f}×) | ≤ +2 ms at p50 | {met} |")
        print(f"load average at the end {os.getloadavg()}")
    finally:
        for proc in reversed(procs):
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(10)
        hosts.close()
        subprocess.run(["rm", "-rf", str(tmp)])
    return 0


if __name__ == "__main__":
    if "--broker" in sys.argv:
        print(json.dumps(broker_side(json.load(sys.stdin))))
    else:
        sys.exit(main())
