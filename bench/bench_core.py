#!/usr/bin/env python
"""The pure core's cost per claim, without sockets, threads or SQLite: what the
coordinator's request loop spends deciding, as a ratio to the floor of any server that
decodes a msgpack claim, stores it and encodes a reply.

    python bench/bench_core.py                  # CPU time, median of 5 rounds
    python bench/bench_core.py --instructions   # instructions, under valgrind (about 3 min)
    python bench/bench_core.py --instructions --turns --per-session 200   # and the loop's work around it

Workload: 100 live sessions, each claiming 200 distinct files one at a time (20,000
grants; the registry grows from 0 to 20,000 claims), then releasing them; every message
is decoded from its wire bytes as the shell would.  The baseline runs the same
messages through ``msgspec`` decode, a dict insert and a ``Granted`` encode.

Wall and CPU times swing with whatever else the machine runs; ``--instructions`` counts
executed instructions with callgrind instead (the same count for the same code and
inputs, however loaded the machine: a figure two trees can be compared by across days).
It runs each measurement twice, with and without the workload, and subtracts, so the
interpreter's start-up and imports cancel out (a release: the claims and their releases,
minus the claims).  ``--turns`` adds what the request loop does around the core, minus
sockets and trio: decode each frame, commit each batch of 200 messages' records to a
real ledger file, encode the replies and publications, with the cyclic collector set as
``serve`` sets it (its passes are deterministic too: they follow allocation counts).
It is a benchmark, not a test.
"""

from __future__ import annotations

import argparse
import gc
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PROJECT))

from coordinator.core import Core  # noqa: E402
from coordinator.effects import Send  # noqa: E402
from coordinator.server import GC_THRESHOLD  # noqa: E402  (what serve sets after start-up)
from coordinator.settings import Settings  # noqa: E402
from protocol import messages as m  # noqa: E402
from protocol.codec import decode_request, encode  # noqa: E402

SESSIONS = 100
TURN = 200  # messages per turn of the request loop under figure 2 of bench_coordinator.py


def workload(per_session: int) -> tuple[Core, list[bytes], list[bytes]]:
    """A core with SESSIONS live sessions, and the claim and release frames to send it."""
    core = Core(Settings(heartbeat=30, liveness=100), repo="/repo/.git", host="bench")
    core.start([], 0.0)
    sessions = []
    for i in range(SESSIONS):
        welcome = next(e.message for e in core.receive(b"p%d" % i, m.Hello(agent=f"a{i}"), 1.0) if isinstance(e, Send))
        sessions.append(welcome.session)
    claims, releases = [], []
    for j in range(per_session):
        for i, session in enumerate(sessions):
            path = f"src/a{i}/f{j}.py"
            claims.append(encode(m.Claim(req=2 * j + 1, session=session, paths=[path])))
            releases.append(encode(m.Release(req=2 * j + 2, session=session, paths=[path])))
    return core, claims, releases


def run_core(core: Core, frames: list[bytes], start: float) -> None:
    receive = core.receive
    for k, frame in enumerate(frames):
        receive(b"p", decode_request(frame), start + k * 1e-6)


def run_turns(core: Core, frames: list[bytes], start: float, ledger_dir: str) -> None:
    """What the request loop does per message, minus sockets and trio: decode, decide,
    commit each batch's records to a real ledger, encode the replies and publications,
    with the collector set as ``serve`` sets it (its cost is part of the loop's)."""
    from coordinator.effects import Publish
    from ledger import Ledger
    from ledger.records import Record

    ledger = Ledger.open(Path(ledger_dir) / "ledger.db")
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLD)
    gc.enable()
    receive, epoch = core.receive, core.registry.epoch
    for first in range(0, len(frames), TURN):
        effects: list = []
        for k, frame in enumerate(frames[first:first + TURN], first):
            effects += receive(b"p", decode_request(frame), start + k * 1e-6)
        ledger.append_now([e for e in effects if isinstance(e, Record)], epoch=epoch)
        for effect in effects:
            if type(effect) is Send:
                encode(effect.message)
            elif type(effect) is Publish:
                encode(effect.message)
    gc.disable()
    ledger.close()


def run_floor(frames: list[bytes]) -> None:
    """Decode, store, answer: what any server of this protocol does per claim."""
    held: dict[str, int] = {}
    for token, frame in enumerate(frames):
        claim = decode_request(frame)
        held[claim.paths[0]] = token
        encode(m.Granted(req=claim.req, token=token, patterns=claim.paths))


def cpu_rounds(per_session: int, rounds: int) -> None:
    core_us, release_us, floor_us = [], [], []
    for _ in range(rounds):
        core, claims, releases = workload(per_session)
        gc.collect()
        t = time.process_time()
        run_core(core, claims, 2.0)
        core_us.append(1e6 * (time.process_time() - t) / len(claims))
        t = time.process_time()
        run_core(core, releases, 3.0)
        release_us.append(1e6 * (time.process_time() - t) / len(releases))
        t = time.process_time()
        run_floor(claims)
        floor_us.append(1e6 * (time.process_time() - t) / len(claims))
    c, r, f = (statistics.median(x) for x in (core_us, release_us, floor_us))
    n = per_session * SESSIONS
    print(f"claims   {c:6.1f} us CPU each  ({n:,} grants, registry 0 -> {n:,} claims; median of {rounds})")
    print(f"releases {r:6.1f} us CPU each")
    print(f"floor    {f:6.1f} us CPU each  (decode + dict insert + encode a Granted)")
    print(f"ratio    claims / floor = {c / f:.1f}")


def instructions(what: str, per_session: int) -> int:
    """Instructions of ``--only WHAT`` with the workload minus without it."""
    counts = []
    for n in (0, per_session):
        proc = subprocess.run(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null",
             sys.executable, __file__, "--only", what, "--per-session", str(n)],
            capture_output=True, text=True, check=True,
        )
        counts.append(int(re.search(r"Collected : (\d+)", proc.stderr).group(1)))
    return counts[1] - counts[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--instructions", action="store_true", help="count instructions under valgrind (callgrind)")
    parser.add_argument("--per-session", type=int, default=None, help="claims per session (default 200; 20 with --instructions)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--turns", action="store_true", help="also the request loop's work around the core: decode, ledger commit, encode, collector")
    parser.add_argument("--only", choices=["core", "release", "floor", "turns"], help=argparse.SUPPRESS)  # one measured run, for --instructions
    args = parser.parse_args()
    if args.only:  # inside valgrind: build the workload, run one side of it once
        # The codec builds its decoder on first use: build it here, in both measured runs,
        # so that its one-time cost cancels out instead of landing on the claims.
        decode_request(encode(m.Heartbeat(session="warm-up")))
        core, claims, releases = workload(args.per_session)
        gc.disable()  # the collector's passes depend on allocation history, not on the code measured
        if args.only == "floor":
            run_floor(claims)
            return
        if args.only == "turns":
            with tempfile.TemporaryDirectory() as ledger_dir:
                run_turns(core, claims, 2.0, ledger_dir)
            return
        run_core(core, claims, 2.0)
        if args.only == "release":
            run_core(core, releases, 3.0)
        return
    print(f"command: python bench/{Path(__file__).name} {' '.join(sys.argv[1:])}")
    print(f"python {sys.version.split()[0]}, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.instructions:
        if shutil.which("valgrind") is None:
            sys.exit("--instructions needs valgrind (apt-get install valgrind)")
        per_session = args.per_session or 20
        n = per_session * SESSIONS
        core, floor = instructions("core", per_session) / n, instructions("floor", per_session) / n
        release = instructions("release", per_session) / n - core
        print(f"claims   {core:9,.0f} instructions each ({n:,} grants)")
        print(f"releases {release:9,.0f} instructions each")
        print(f"floor    {floor:9,.0f} instructions each (decode + dict insert + encode a Granted)")
        print(f"ratio    claims / floor = {core / floor:.1f}")
        if args.turns:
            turns = instructions("turns", per_session) / n
            print(f"turns    {turns:9,.0f} instructions per claim (decode, core, ledger commit per {TURN}, encode, collector)")
    else:
        cpu_rounds(args.per_session or 200, args.rounds)


if __name__ == "__main__":
    main()
