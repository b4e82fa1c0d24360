#!/usr/bin/env python
"""The merge queue, measured: agents landing through `lockstep land` with a real check suite.

    python bench/bench_land.py                          # 4 agents x 5 tasks, bugs in 20 % of tasks
    python bench/bench_land.py --agents 2 --tasks 2     # a quick look
    python bench/bench_land.py --agents 6 --tasks 4 --suite-seconds 3
    python bench/bench_land.py --batch 4                # up to 4 queued landings per verify

The workflow of bench_collisions.py, now concurrent and landing through the queue:

* N agents, each a thread with its own worktree and branch, share one repository of
  ``--files`` modules (``src/modNNN.py``, each with a function returning its number) and a
  pytest suite that imports every module, checks each function, and spends
  ``--suite-seconds`` in one slow test (a stand-in for a real suite's run time):
  ``[checks.tests]`` in ``lockstep.toml``.
* Each task picks 1-3 modules with Zipf popularity, asks ``intent`` for them first (as
  the hooks do: a stale base makes the agent ``git merge main`` and ask again; a holder
  makes it pick again), works for a while (``--work`` seconds, uniform), edits them
  (a header line and a random comment line), commits, and runs ``lockstep land``.  With
  probability ``--bugs`` the edit also breaks a function: the suite fails on the merged
  tree, the landing is refused ``failed``, the agent fixes it, commits and lands again.
  A ``conflict`` or ``stale`` verdict makes it merge main and land again.  Once landed it
  resets its worktree to main.
* Afterwards the integration branch is checked **independently**: every commit on its
  first-parent history since the start is checked out in a fresh worktree and the suite
  run there; every one must pass, and no file on main may hold conflict markers.

With ``--batch N`` the repository says ``[land] batch = N``: up to N queued landings are
merged together and verified in one run, bisected on a failure.

Prints: landings, refusals by verdict, the verify runs the queue made, the queue's throughput (landings per minute) and
the bound a one-at-a-time queue has (60 / the mean time a landing holds the queue: the
ratio says how much of the queue's capacity the agents used), the share of the agents'
wall time spent in ``lockstep land`` and the part of it spent waiting behind other
landings, and the independent verdict on every integration commit.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LINES = 12  # comment lines per module after its function


def git(cwd: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=check)


def module_text(i: int, broken: bool = False, header: str = "init", comments: dict | None = None) -> str:
    comments = comments or {}
    body = [f"# header: {header}\n", f"def value_{i:03d}():\n", f"    return {i}{' + 1' if broken else ''}\n"]
    body += [comments.get(k, f"# line {k} of mod{i:03d}\n") for k in range(LINES)]
    return "".join(body)


SUITE = '''import importlib
import time

import pytest

MODULES = {files}


@pytest.mark.parametrize("i", range(MODULES))
def test_module_value(i):
    module = importlib.import_module(f"src.mod{{i:03d}}")
    assert getattr(module, f"value_{{i:03d}}")() == i


def test_the_slow_part():
    time.sleep({seconds})  # stands for the run time of a real suite
'''


def make_repo(base: Path, files: int, agents: int, seconds: float, batch: int = 1) -> tuple[Path, list[Path]]:
    main = base / "main"
    (main / "src").mkdir(parents=True)
    git(main, "init", "-q", "-b", "main")
    git(main, "config", "user.email", "bench@example.com")
    git(main, "config", "user.name", "bench")
    (main / "src" / "__init__.py").write_text("")
    for i in range(files):
        (main / "src" / f"mod{i:03d}.py").write_text(module_text(i))
    (main / "tests").mkdir()
    (main / "tests" / "test_suite.py").write_text(SUITE.format(files=files, seconds=seconds))
    (main / "lockstep.toml").write_text(
        f'[checks.tests]\ncmd = "{sys.executable} -m pytest -q -p no:cacheprovider -x tests"\ntimeout = 300\n\n[land]\nbatch = {batch}\n'
    )
    git(main, "add", "-A")
    git(main, "commit", "-q", "-m", "init")
    trees = []
    for a in range(agents):
        tree = base / f"w{a + 1}"
        git(main, "worktree", "add", "-q", "-b", f"w{a + 1}", str(tree))
        trees.append(tree)
    return main, trees


class Coordinator:
    def __init__(self, main: Path) -> None:
        self.main, self.env = main, lockstep_env()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "agents.cli", "serve", "--heartbeat", "30", "--liveness", "100"],
            cwd=main, env=self.env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        state = main / ".git" / "lockstep" / "coordinator.json"
        deadline = time.monotonic() + 30
        while not state.exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the coordinator did not start")
            time.sleep(0.05)

    def verify_runs(self) -> int:
        """The queue's verify runs: distinct merge commits it verified (from the ledger)."""
        tail = subprocess.run(
            [sys.executable, "-m", "agents.cli", "ledger", "tail", "-n", "100000", "--kind", "land.verifying", "--json"],
            cwd=self.main, env=self.env, capture_output=True, text=True, timeout=120,
        )
        return len({json.loads(line)["data"]["candidate"] for line in tail.stdout.splitlines() if line.strip()})

    def stop(self) -> None:
        subprocess.run([sys.executable, "-m", "agents.cli", "stop"], cwd=self.main, env=self.env, capture_output=True, timeout=30)
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def lockstep_env(**extra: str) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    env["PYTHONPATH"] = str(ROOT)
    env["LOCKSTEP_TIMEOUT"] = "10"
    env.update(extra)
    return env


@dataclass
class AgentLog:
    name: str
    landed: int = 0
    refused: dict = field(default_factory=dict)  # verdict -> count
    in_land: float = 0.0  # seconds inside `lockstep land`
    queued: float = 0.0  # of which waiting behind other landings
    held: list = field(default_factory=list)  # seconds each landing held the queue (its own turn)
    wall: float = 0.0
    errors: list = field(default_factory=list)


def agent_loop(name: str, tree: Path, args, seed: int, log: AgentLog, start: threading.Barrier) -> None:
    from agents.oneshot import open_oneshot

    rng = random.Random(seed)
    weights = [1.0 / rank ** args.skew for rank in range(1, args.files + 1)]
    env = lockstep_env(GIT_AUTHOR_NAME=name, GIT_COMMITTER_NAME=name)
    start.wait()
    began = time.monotonic()
    with open_oneshot(name, cwd=tree, on_notice=lambda text: None) as session:
        for number in range(1, args.tasks + 1):
            files = ask_for_files(session, tree, rng, weights, args)
            time.sleep(rng.uniform(*args.work))  # the agent works
            broken = rng.random() < args.bugs
            for k, i in enumerate(files):
                edit(tree, i, f"{name} task {number}", rng, broken=broken and k == 0)
            git(tree, "commit", "-q", "-am", f"{name} task {number}")
            for _attempt in range(6):
                t0 = time.monotonic()
                done = subprocess.run(
                    [sys.executable, "-m", "agents.cli", "land", "--agent", name, "--json"],
                    cwd=tree, env=env, capture_output=True, text=True, timeout=900,
                )
                log.in_land += time.monotonic() - t0
                try:
                    landing = json.loads(done.stdout)
                except ValueError:
                    log.errors.append(done.stderr.strip()[-300:])
                    break
                if "error" in landing:
                    log.errors.append(landing["error"]["message"])
                    break
                log.queued += landing.get("waited", 0.0)
                log.held.append(landing.get("took", 0.0) - landing.get("waited", 0.0))
                if landing["verdict"] == "landed":
                    log.landed += 1
                    break
                log.refused[landing["verdict"]] = log.refused.get(landing["verdict"], 0) + 1
                if landing["verdict"] == "failed":  # fix what broke, as the failure report says
                    for i in files:
                        path = tree / "src" / f"mod{i:03d}.py"
                        path.write_text(path.read_text().replace(f"return {i} + 1\n", f"return {i}\n"))
                    git(tree, "commit", "-q", "-am", f"{name} task {number}: fix value_{files[0]:03d}", check=False)
                elif git(tree, "merge", "-q", "--no-edit", "main", check=False).returncode != 0:
                    # conflict, stale, blocked: catch up with main and try again (a merge
                    # that conflicts here would mean the intents let two agents collide)
                    log.errors.append(f"{name} task {number}: git merge main conflicted")
                    git(tree, "merge", "--abort", check=False)
                    break
            git(tree, "reset", "-q", "--hard", "main")
            session.release(all=True)
    log.wall = time.monotonic() - began


def ask_for_files(session, tree: Path, rng: random.Random, weights: list[float], args) -> list[int]:
    """Intent before writing; obey: merge main on a stale base, pick again when held."""
    while True:
        files = sorted(set(rng.choices(range(args.files), weights, k=rng.randint(1, 3))))
        for _ in range(3):
            decision = session.intent([f"src/mod{i:03d}.py" for i in files])
            if decision.verdict != "block":
                return files
            if not decision.stale:
                break
            git(tree, "merge", "-q", "--no-edit", "main", check=False)
        time.sleep(0.2)  # held by another agent: think of another task


def edit(tree: Path, i: int, header: str, rng: random.Random, broken: bool) -> None:
    path = tree / "src" / f"mod{i:03d}.py"
    lines = path.read_text().splitlines(keepends=True)
    lines[0] = f"# header: {header}\n"
    k = rng.randrange(3, len(lines))
    lines[k] = f"# line {k - 3}: {header}\n"
    if broken:
        lines[2] = f"    return {i} + 1\n"
    path.write_text("".join(lines))


def verify_history(main: Path, base: str, tmp: Path) -> tuple[int, int, list[str]]:
    """Run the suite on every first-parent commit of main after ``base``, in a fresh
    worktree: (commits, green, conflict-marker files on the tip)."""
    commits = git(main, "rev-list", "--first-parent", "--reverse", f"{base}..main").stdout.split()
    check = tmp / "independent"
    git(main, "worktree", "add", "-q", "--detach", str(check), base)
    green = 0
    for commit in commits:
        git(check, "checkout", "-q", "--detach", "-f", commit)
        git(check, "clean", "-q", "-ffdx")
        ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x", "tests"], cwd=check, capture_output=True, text=True, timeout=600)
        green += ran.returncode == 0
    markers = git(main, "grep", "-l", "-e", "^<<<<<<< ", "main", check=False).stdout.split()
    return len(commits), green, markers


def run(args) -> dict:
    with tempfile.TemporaryDirectory(prefix="lockstep-land-") as tmp:
        main, trees = make_repo(Path(tmp), args.files, args.agents, args.suite_seconds, args.batch)
        base = git(main, "rev-parse", "main").stdout.strip()
        coordinator = Coordinator(main)
        logs = [AgentLog(f"w{i + 1}") for i in range(args.agents)]
        barrier = threading.Barrier(args.agents + 1)
        threads = [
            threading.Thread(target=agent_loop, args=(log.name, tree, args, args.seed * 100 + i, log, barrier), daemon=True)
            for i, (log, tree) in enumerate(zip(logs, trees))
        ]
        try:
            for thread in threads:
                thread.start()
            barrier.wait()
            began = time.monotonic()
            for thread in threads:
                thread.join()
            wall = time.monotonic() - began
            verify_runs = coordinator.verify_runs()
        finally:
            coordinator.stop()
        commits, green, markers = verify_history(main, base, Path(tmp))
    return {"logs": logs, "wall": wall, "commits": commits, "green": green, "markers": markers, "verify_runs": verify_runs}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--agents", type=int, default=4)
    parser.add_argument("--tasks", type=int, default=5, help="tasks per agent (default 5)")
    parser.add_argument("--files", type=int, default=30)
    parser.add_argument("--skew", type=float, default=1.0)
    parser.add_argument("--bugs", type=float, default=0.2, help="share of tasks whose edit breaks a check (default 0.2)")
    parser.add_argument("--suite-seconds", type=float, default=2.0, help="the suite's slow test (default 2 s)")
    parser.add_argument("--work", type=float, nargs=2, default=(1.0, 4.0), metavar=("MIN", "MAX"), help="seconds of work per task (default 1 4)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--batch", type=int, default=1, help="[land] batch: landings verified together (default 1: one at a time)")
    args = parser.parse_args()
    print(f"$ python bench/bench_land.py {' '.join(sys.argv[1:])}".rstrip())
    print(
        f"{args.agents} agents x {args.tasks} tasks, {args.files} modules, bugs {args.bugs:.0%}, suite slow test "
        f"{args.suite_seconds:g}s, work {args.work[0]:g}-{args.work[1]:g}s, batch {args.batch}, seed {args.seed}; "
        f"git {git(ROOT, '--version').stdout.split()[-1]}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    )
    result = run(args)
    logs, wall = result["logs"], result["wall"]
    landed = sum(log.landed for log in logs)
    refused: dict = {}
    for log in logs:
        for verdict, n in log.refused.items():
            refused[verdict] = refused.get(verdict, 0) + n
    held = [h for log in logs for h in log.held]
    mean_held = sum(held) / len(held) if held else 0.0
    throughput = 60.0 * landed / wall if wall else 0.0
    bound = 60.0 / mean_held if mean_held else 0.0
    agent_wall = sum(log.wall for log in logs)
    in_land = sum(log.in_land for log in logs)
    queued = sum(log.queued for log in logs)
    errors = [e for log in logs for e in log.errors]
    print(f"landed {landed} of {args.agents * args.tasks} tasks; refused: {', '.join(f'{v} {n}' for v, n in sorted(refused.items())) or 'none'}; "
          f"wall {wall:.1f}s")
    attempts = landed + sum(refused.values())
    print(f"verify runs {result['verify_runs']} for {attempts} landing attempts "
          f"({attempts / result['verify_runs'] if result['verify_runs'] else 0:.2f} attempts per run)")
    print(f"queue throughput {throughput:.1f} landings/min; a landing held the queue {mean_held:.2f}s on average "
          f"(one-at-a-time bound {bound:.1f}/min: {throughput / bound if bound else 0:.0%} of it used"
          f"{'; a batch holds it for all its landings at once' if args.batch > 1 else ''})")
    print(f"agents' wall time in `lockstep land`: {in_land / agent_wall:.0%}; of it waiting behind other landings: "
          f"{queued / agent_wall:.0%} of wall time")
    print(f"integration branch, checked independently: {result['green']} of {result['commits']} commits green; "
          f"files with conflict markers on main: {len(result['markers'])}")
    if errors:
        print(f"errors: {len(errors)}; first: {errors[0]}")
    ok = result["green"] == result["commits"] and not result["markers"] and not errors
    print("green after every landing, no conflicts on main:", "yes" if ok else "NO")


if __name__ == "__main__":
    shutil.which("git") or sys.exit("git is needed")
    main()
