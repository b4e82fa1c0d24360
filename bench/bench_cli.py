#!/usr/bin/env python
"""Benchmark of the one-shot CLI: wall time of a whole `lockstep` process, as ratios to
bare Python started in the same run.

    python bench/bench_cli.py            # 21 rounds, about 30 s on 2 cores
    python bench/bench_cli.py --quick    # 7 rounds
    python bench/bench_cli.py --rounds 41

Every figure is the median wall time of a fresh process (fork, exec, interpreter start,
imports, one request, exit) against a real `lockstep serve` in a throwaway git
repository under the temp dir:

* `hook claude` with a real Claude Code PreToolUse payload for Write, deny (the file is
  held by another live agent) and allow (the writer's own file);
* `intent PATH --agent writer`;
* `status --json`;

and the baselines, measured interleaved with them (one of each per round, so a change
of load hits every figure alike): `python -c pass` and `python -c "import zmq, msgspec"`
(the floor of any client that speaks the protocol with pyzmq and msgspec).  Each run's
exit code and output are checked, so a fast failure cannot pass for a fast answer.
Target (issue 6): `hook claude` and `intent` <= 3x `python -c pass`.  It is a benchmark,
not a test: it exits 0 whether or not the target is met.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[1]
LOCKSTEP = [sys.executable, "-m", "agents.cli"]
STARTUP_TIMEOUT = 30.0
TARGET = 3.0  # x `python -c pass`, for `hook claude` and `intent`
HEAVY = ("trio", "rich", "coordinator", "tomllib", "difflib", "urllib.request", "importlib.metadata")


def median(values: list[float]) -> float:
    s = sorted(values)
    n = len(s)
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def claude_event(kind: str, tool: str, path: Path, cwd: Path, session: str, **extra: object) -> str:
    """A Claude Code hook event as it arrives on stdin (PreToolUse for Write)."""
    return json.dumps({
        "session_id": session,
        "transcript_path": str(cwd / ".claude" / f"{session}.jsonl"),
        "cwd": str(cwd),
        "permission_mode": "default",
        "hook_event_name": kind,
        "tool_name": tool,
        "tool_input": {"file_path": str(path), "content": "print('hello')\n", **extra},
    })


class Bench:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="lsb-cli-"))
        self.repo = self.dir / "repo"
        env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
        env["PYTHONPATH"] = str(PROJECT) + os.pathsep + env.get("PYTHONPATH", "")
        env["GIT_CEILING_DIRECTORIES"] = str(self.dir)
        # Measure what an installed lockstep costs: pip compiles its modules to bytecode,
        # so the runs here may write (and then read) __pycache__ too.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        self.env = env
        self.proc: subprocess.Popen | None = None

    def git(self, *args: str) -> None:
        subprocess.run(["git", *args], cwd=self.repo, env=self.env, check=True, capture_output=True)

    def setup(self) -> None:
        self.repo.mkdir()
        self.git("init", "-q", "-b", "main")
        self.git("config", "user.email", "bench@example.com")
        self.git("config", "user.name", "bench")
        (self.repo / "src").mkdir()
        (self.repo / "src" / "app.py").write_text("print('hi')\n")
        self.git("add", ".")
        self.git("commit", "-q", "-m", "init")
        self.log = open(self.dir / "serve.out", "wb")
        self.proc = subprocess.Popen([*LOCKSTEP, "serve"], cwd=self.repo, env=self.env, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log)
        state = self.repo / ".git" / "lockstep" / "coordinator.json"
        deadline = time.monotonic() + STARTUP_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the coordinator exited with {self.proc.returncode}: see {self.dir / 'serve.out'}")
            try:
                if json.loads(state.read_text()).get("pid") == self.proc.pid:
                    break
            except (OSError, ValueError):
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"the coordinator did not start within {STARTUP_TIMEOUT}s")
            time.sleep(0.02)  # polling the state file with a deadline
        # Another live agent holds src/app.py (a one-shot session with a TTL outlives the run).
        self.run([*LOCKSTEP, "claim", "src/app.py", "--agent", "holder"], expect=0)

    def run(self, argv: list[str], *, stdin: str | None = None, expect: int = 0, extra_env: dict | None = None,
            check=None) -> float:
        env = dict(self.env, **(extra_env or {}))
        start = time.perf_counter()
        done = subprocess.run(argv, cwd=self.repo, env=env, input=stdin, capture_output=True, text=True, timeout=60)
        elapsed = time.perf_counter() - start
        if done.returncode != expect or (check is not None and not check(done.stdout)):
            raise RuntimeError(f"{argv[2:]} exited {done.returncode} (expected {expect}): {done.stdout!r} {done.stderr!r}")
        return elapsed

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                subprocess.run([*LOCKSTEP, "stop"], cwd=self.repo, env=self.env, capture_output=True, timeout=20)
                self.proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                pass
            if self.proc.poll() is None:
                self.proc.kill()  # our own child, by pid
                self.proc.wait()
        if self.proc is not None:
            self.log.close()
        shutil.rmtree(self.dir, ignore_errors=True)


def denied(stdout: str) -> bool:
    return json.loads(stdout)["hookSpecificOutput"]["permissionDecision"] == "deny"


def cases(bench: Bench) -> dict[str, dict]:
    repo = bench.repo
    writer = {"LOCKSTEP_AGENT": "writer"}
    return {
        "python -c pass": {"argv": [sys.executable, "-c", "pass"]},
        'python -c "import zmq, msgspec"': {"argv": [sys.executable, "-c", "import zmq, msgspec"]},
        "lockstep hook claude (deny)": {
            "argv": [*LOCKSTEP, "hook", "claude"],
            "stdin": claude_event("PreToolUse", "Write", repo / "src" / "app.py", repo, "bench-deny"),
            "extra_env": writer,
            "check": denied,
        },
        "lockstep hook claude (allow)": {
            "argv": [*LOCKSTEP, "hook", "claude"],
            "stdin": claude_event("PreToolUse", "Write", repo / "src" / "mine.py", repo, "bench-allow"),
            "extra_env": writer,
            "check": lambda out: out == "",
        },
        "lockstep intent": {
            "argv": [*LOCKSTEP, "intent", "src/mine.py", "--agent", "writer"],
            "check": lambda out: out.startswith("allow"),
        },
        "lockstep status --json": {
            "argv": [*LOCKSTEP, "status", "--json"],
            "check": lambda out: any(c["holder"] == "holder" for c in json.loads(out)["claims"]),
        },
    }


def heavy_imports(bench: Bench, argv: list[str], stdin: str | None, extra_env: dict | None) -> list[str]:
    """Which of the heavy packages a run imports (from ``-X importtime``)."""
    env = dict(bench.env, **(extra_env or {}))
    done = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=bench.repo, env=env, input=stdin,
                          capture_output=True, text=True, timeout=60)
    names = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time:")}
    return [h for h in HEAVY if any(n == h or n.startswith(h + ".") for n in names)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=21, help="runs of each command (default 21)")
    parser.add_argument("--quick", action="store_true", help="7 rounds")
    args = parser.parse_args()
    rounds = 7 if args.quick else args.rounds

    print(f"$ python bench/bench_cli.py{' --quick' if args.quick else ''}  ({rounds} rounds)")
    print(f"python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}")
    bench = Bench()
    try:
        bench.setup()
        table = cases(bench)
        for spec in table.values():  # warm the page cache and the coordinator once
            bench.run(spec["argv"], stdin=spec.get("stdin"), extra_env=spec.get("extra_env"), check=spec.get("check"))
        times: dict[str, list[float]] = {name: [] for name in table}
        for _ in range(rounds):
            for name, spec in table.items():
                times[name].append(
                    bench.run(spec["argv"], stdin=spec.get("stdin"), extra_env=spec.get("extra_env"), check=spec.get("check"))
                )
        base = median(times["python -c pass"])
        floor = median(times['python -c "import zmq, msgspec"'])
        print()
        print(f"{'command':<34} {'median':>9} {'x pass':>7} {'x zmq+msgspec':>14}  target")
        for name, samples in times.items():
            mid = median(samples)
            target = ""
            if name.startswith(("lockstep hook", "lockstep intent")):
                target = f"<= {TARGET:g}x pass: {'met' if mid / base <= TARGET else 'not met'}"
            print(f"{name:<34} {mid * 1000:7.1f}ms {mid / base:6.2f}x {mid / floor:13.2f}x  {target}")
        print()
        for name in ("lockstep hook claude (deny)", "lockstep intent", "lockstep status --json"):
            spec = table[name]
            found = heavy_imports(bench, spec["argv"], spec.get("stdin"), spec.get("extra_env"))
            print(f"{name}: imports {', '.join(found) if found else 'none'} of {', '.join(HEAVY)}")
        print(f"load average at the end {os.getloadavg()[0]:.2f}")
    finally:
        bench.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
