"""``lockstep demo``: the whole story in one run, on a throwaway repository.

Everything here is real: a git repository with three worktrees, a coordinator process,
agents that are real processes calling the real CLI, and a real SIGKILL.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import click

LOCKSTEP = [sys.executable, "-m", "agents.cli"]


class DemoFailed(Exception):
    pass


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True)


def _make_repo(base: Path) -> tuple[Path, dict[str, Path]]:
    repo = base / "shop"
    for rel, text in {
        "src/api/handlers.py": "def handle(): ...\n",
        "src/api/routes.py": "ROUTES = []\n",
        "src/ui/app.tsx": "export const App = () => null;\n",
        "docs/guide.md": "# Guide\n",
    }.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "-c", "user.email=demo@example.com", "-c", "user.name=demo", "add", ".")
    _git(repo, "-c", "user.email=demo@example.com", "-c", "user.name=demo", "commit", "-q", "-m", "start")
    trees = {"alice": repo}
    for name in ("bob", "carol"):
        trees[name] = base / f"shop-{name}"
        _git(repo, "worktree", "add", "-q", "-b", name, str(trees[name]))
    return repo, trees


def _env() -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LOCKSTEP_")}
    root = str(Path(__file__).resolve().parents[1])
    env["PYTHONPATH"] = root + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _call(cwd: Path, *args: str) -> tuple[int, dict]:
    proc = subprocess.run([*LOCKSTEP, *args, "--json"], cwd=cwd, env=_env(), capture_output=True, text=True, timeout=30)
    try:
        return proc.returncode, json.loads(proc.stdout)
    except ValueError:
        raise DemoFailed(f"lockstep {' '.join(args)} printed {proc.stdout!r} {proc.stderr!r}") from None


def _wait(predicate, what: str, timeout: float = 15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.05)
    raise DemoFailed(f"timed out waiting for {what}")


class _Narrator:
    """Tells the story on stdout, or, with --json, on stderr while keeping the steps for
    the JSON summary printed at the end."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.steps: list[dict] = []

    def echo(self, text: str) -> None:
        click.echo(text, err=self.as_json)

    def say(self, step: str, text: str, ok: bool | None = None) -> None:
        self.steps.append({"step": step, "text": text, "ok": ok})
        mark = {True: click.style("✓", fg="green"), False: click.style("✗", fg="red"), None: "•"}[ok]
        self.echo(f"  {mark} {click.style(step, bold=True)}  {text}")


def run_demo(keep: bool = False, as_json: bool = False) -> int:
    story = _Narrator(as_json)
    base = Path(tempfile.mkdtemp(prefix="lockstep-demo-"))
    coordinator = run = None
    try:
        story.echo(click.style("Lockstep demo", bold=True) + f"  (a throwaway repository in {base})\n")
        repo, trees = _make_repo(base)
        story.say("setup", "git repository 'shop' with worktrees for alice, bob and carol")

        coordinator = subprocess.Popen(
            [*LOCKSTEP, "serve", "--heartbeat", "0.5", "--lock-delay", "5"],
            cwd=repo, env=_env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        state_file = repo / ".git" / "lockstep" / "coordinator.json"
        _wait(lambda: state_file.exists() and json.loads(state_file.read_text()).get("pid") == coordinator.pid, "the coordinator")
        story.say("serve", f"coordinator pid {coordinator.pid}, mode parallel-strict, heartbeat 0.5s x 3")

        # alice works through `lockstep run`: her command claims src/api/ and keeps working
        script = "import subprocess,sys; subprocess.run(sys.argv[1:]+['claim','src/api/','--json']); sys.stdin.read()"
        run = subprocess.Popen(
            [*LOCKSTEP, "run", "--agent", "alice", "--", sys.executable, "-c", script, *LOCKSTEP],
            cwd=trees["alice"], env=_env(), stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        alice_claim = _wait(lambda: next((c for c in _call(repo, "status")[1]["claims"] if c["holder"] == "alice"), None), "alice's claim")
        alice_pid = next(a["pid"] for a in _call(repo, "status")[1]["agents"] if a["name"] == "alice")
        story.say("alice", f"`lockstep run` claims src/api/ from her worktree → granted, token {alice_claim['token']} (pid {alice_pid} watched)", True)

        rc, out = _call(trees["bob"], "claim", "src/api/handlers.py", "--agent", "bob")
        story.say("bob", f"claims src/api/handlers.py from another worktree → refused: {out.get('reason')}", rc == 1 or None)
        rc, out = _call(trees["bob"], "claim", "docs/", "--agent", "bob")
        story.say("bob", f"claims docs/ instead → granted, token {out['token']}", rc == 0)
        rc, out = _call(trees["bob"], "intent", "src/api/routes.py", "--agent", "bob")
        story.say("bob", f"is about to write src/api/routes.py → {out['verdict']}: held by {', '.join(out['holders'])}", rc == 1)
        rc, out = _call(trees["carol"], "intent", "src/ui/app.tsx", "--agent", "carol")
        story.say("carol", f"is about to write src/ui/app.tsx → {out['verdict']}, auto-claimed with token {out['token']}", rc == 0)
        rc, out = _call(trees["carol"], "claim", "src/**/*.py", "--agent", "carol")
        story.say("carol", f"claims the glob src/**/*.py → refused (it overlaps src/api/): holder {out['conflicts'][0]['holder']}", rc == 1)

        os.kill(alice_pid, signal.SIGKILL)
        killed = time.monotonic()
        story.say("kill", f"alice's process {alice_pid} gets SIGKILL, mid-work")
        _wait(lambda: not any(c["holder"] == "alice" for c in _call(repo, "status")[1]["claims"]), "alice's claims to go")
        story.say("alice", f"gone; her claims were released {time.monotonic() - killed:.2f}s later (pid watch: no lock delay)", True)
        rc, out = _call(trees["bob"], "claim", "src/api/handlers.py", "--agent", "bob")
        story.say("bob", f"claims src/api/handlers.py again → granted, token {out.get('token')}", rc == 0)
        _, state = _call(repo, "status")
        rc, out = _call(trees["alice"], "intent", "src/api/routes.py", "--agent", "alice", "--token", str(alice_claim["token"]))
        story.say("fence", f"a late write with alice's old token {alice_claim['token']} → {out['verdict']}", rc == 1)

        story.echo("\n" + click.style("Where things stand", bold=True))
        for agent in state["agents"]:
            story.echo(f"    {agent['name']:<7} {agent['state']:<6} {agent['reason']}")
        for claim in state["claims"]:
            story.echo(f"    {claim['pattern']:<22} {claim['holder']:<7} token {claim['token']} ({claim['access']})")
        ledger = repo / ".git" / "lockstep" / "ledger.db"
        counts = subprocess.run(
            [*LOCKSTEP, "ledger", "tail", "-n", "1000", "--json"], cwd=repo, env=_env(), capture_output=True, text=True
        ).stdout.splitlines()
        kinds: dict[str, int] = {}
        for line in counts:
            kind = json.loads(line)["kind"]
            kinds[kind] = kinds.get(kind, 0) + 1
        story.echo("\n" + click.style("The ledger", bold=True) + f" ({ledger}): " + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())))
        prog = _command_name()
        story.echo(
            f"\nNext, in your repository: `{prog} serve --detach`, then in each worktree "
            f"`{prog} run --agent NAME -- your-agent`, and `{prog} top` to watch."
        )
        ok = all(step["ok"] is not False for step in story.steps)
        if as_json:
            click.echo(json.dumps({"ok": ok, "steps": story.steps, "agents": state["agents"], "claims": state["claims"], "ledger": kinds}))
        return 0 if ok else 1
    except (DemoFailed, subprocess.SubprocessError, OSError, KeyError) as exc:
        click.echo(f"lockstep demo failed: {exc}", err=True)
        return 1
    finally:
        for proc in (run, coordinator):
            if proc is not None and proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
        if keep:
            story.echo(f"(kept {base})")
        else:
            shutil.rmtree(base, ignore_errors=True)
            story.echo(f"(deleted the throwaway repository {base}; `demo --keep` keeps it)")


def _command_name() -> str:
    """How to run lockstep from anywhere: ``lockstep`` if that is on PATH and is this
    one, else this script's absolute path (a virtualenv's bin is often not on PATH),
    else the module."""
    on_path = shutil.which("lockstep")
    script = sys.argv[0] if os.path.basename(sys.argv[0]) == "lockstep" else None
    if on_path and (script is None or os.path.realpath(on_path) == os.path.realpath(script)):
        return "lockstep"
    if script:
        return os.path.abspath(script)
    return f"{sys.executable} -m agents.cli"
