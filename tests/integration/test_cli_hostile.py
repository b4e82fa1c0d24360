"""The command line under hostile conditions: closed descriptors, odd names, odd
repositories.  Each case: one clear line, the documented exit code, no traceback, and
the coordinator keeps serving."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import LOCKSTEP, PROJECT, Result, cli, env_for, holders

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


def _with_closed(fd: int, *args: str, cwd) -> Result:
    """Run lockstep with descriptor ``fd`` closed (a shell's `>&-` / `2>&-` / `<&-`)."""
    redirect = {0: "<&-", 1: ">&-", 2: "2>&-"}[fd]
    proc = subprocess.run(
        ["sh", "-c", f'exec "$@" {redirect}', "sh", *LOCKSTEP, *args],
        cwd=cwd, env=env_for(), capture_output=True, text=True, timeout=60,
    )
    return Result(proc.returncode, proc.stdout, proc.stderr)


def test_a_closed_stdout_is_no_traceback_on_the_fast_path(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    shown = _with_closed(1, "status", "--json", cwd=repo.root)
    assert (shown.rc, shown.err) == (0, ""), shown
    refused = _with_closed(1, "claim", "--agent", "bob", "src/app.py", cwd=repo.root)
    assert (refused.rc, refused.err) == (1, ""), refused
    assert holders(repo) == {"src/app.py": "alice"}


def test_a_file_named_with_brackets_is_claimed_and_released_as_written(repo, coordinator):
    coordinator(*FAST)
    (repo.root / "a[1].py").write_text("x\n")
    (repo.root / "a1.py").write_text("y\n")
    claimed = cli("claim", "--agent", "alice", "--literal", "a[1].py", "--json", cwd=repo.root)
    assert claimed.rc == 0 and claimed.json["patterns"] == ["a\\[1].py"], claimed
    assert cli("intent", "--agent", "bob", "a1.py", cwd=repo.root).rc == 0  # not the glob's a1.py
    assert cli("intent", "--agent", "bob", "a[1].py", cwd=repo.root).rc == 1  # the file itself
    released = cli("release", "--agent", "alice", "--literal", "a[1].py", "--json", cwd=repo.root)
    assert released.rc == 0 and released.json["released"] == ["a\\[1].py"], released
    assert "a\\[1].py" not in holders(repo)


def test_a_glob_that_misses_the_file_it_spells_gets_a_note(repo, coordinator):
    coordinator(*FAST)
    (repo.root / "a[1].py").write_text("x\n")
    glob = cli("claim", "--agent", "alice", "a[1].py", "--json", cwd=repo.root)
    assert glob.rc == 0 and glob.json["patterns"] == ["a[1].py"], glob  # a glob, as documented
    assert "does not cover the file named a[1].py" in glob.err and "--literal" in glob.err
    assert cli("intent", "--agent", "bob", "a[1].py", cwd=repo.root).rc == 0  # indeed not covered
    plain = cli("claim", "--agent", "alice", "src/*.py", cwd=repo.root)
    assert plain.rc == 0 and plain.err == ""  # no file is named so: no note


def _git(cwd, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=cwd,
                          env=env_for(), capture_output=True, text=True, timeout=60)


def test_a_force_push_over_a_remote_tip_never_fetched_is_checked_not_failed(repo, coordinator, tmp_path):
    """git hands pre-push the remote's tip, which this clone never fetched: the guard
    checked `remote..local`, git failed, and the push was refused with git's error."""
    coordinator(*FAST)
    remote = tmp_path / "remote.git"
    assert _git(tmp_path, "clone", "-q", "--bare", str(repo.root), str(remote)).returncode == 0
    assert _git(repo.root, "remote", "add", "origin", str(remote)).returncode == 0
    assert _git(repo.root, "fetch", "-q", "origin").returncode == 0
    elsewhere = tmp_path / "elsewhere"
    assert _git(tmp_path, "clone", "-q", str(remote), str(elsewhere)).returncode == 0
    (elsewhere / "theirs.py").write_text("t\n")
    assert _git(elsewhere, "add", "theirs.py").returncode == 0
    assert _git(elsewhere, "commit", "-q", "-m", "theirs").returncode == 0
    assert _git(elsewhere, "push", "-q", "origin", "HEAD:main").returncode == 0  # origin/main moved
    assert cli("guard", "install", cwd=repo.root).rc == 0
    (repo.root / "src" / "app.py").write_text("mine\n")
    assert _git(repo.root, "commit", "-q", "-am", "mine", "--no-verify").returncode == 0
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    held = _git(repo.root, "push", "-q", "--force", "origin", "main")
    assert held.returncode != 0 and "src/app.py (held by alice)" in held.stderr, held.stderr
    assert cli("release", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    free = _git(repo.root, "push", "-q", "--force", "origin", "main")
    assert free.returncode == 0, free.stderr


def test_the_guard_outside_a_repository_is_bad_input_in_one_line(tmp_path):
    outside = tmp_path / "plain"
    outside.mkdir()
    env = {"GIT_CEILING_DIRECTORIES": str(tmp_path)}
    for verb in (["install"], ["pre-commit"], ["pre-push"]):
        said = cli("guard", *verb, cwd=outside, env=env)
        assert said.rc == 2 and said.err.count("\n") == 1 and "not in a git repository" in said.err, (verb, said)
        as_json = cli("guard", *verb, "--json", cwd=outside, env=env)
        assert as_json.rc == 2 and as_json.json["error"]["code"] == "usage", (verb, as_json)


def test_report_to_stdout_under_json_is_bad_input_not_a_page(repo, coordinator):
    coordinator(*FAST)
    both = cli("report", "--html", "-", "--json", cwd=repo.root)
    assert both.rc == 2 and both.json["error"]["code"] == "usage", both  # stdout is one JSON document
    page = cli("report", "--html", "-", cwd=repo.root)
    assert page.rc == 0 and page.out.startswith("<!DOCTYPE html>")


def test_a_damaged_state_file_is_no_coordinator_not_a_traceback(repo):
    repo.state_dir.mkdir(parents=True)
    for damaged in ('{"pid": 1, "endpoints": [5]}', '{"pid": 1, "endpoints": "ipc"}', "[]", "{not json"):
        (repo.state_dir / "coordinator.json").write_text(damaged)
        for verb in (["status"], ["stop"], ["top", "--once"], ["claim", "--agent", "alice", "src/app.py"]):
            said = cli(*verb, "--json", cwd=repo.root)
            assert said.rc == 3 and said.json["error"]["code"] == "unreachable", (damaged, verb, said)
            assert "is damaged" in said.json["error"]["message"]
        where = cli("where", "--json", cwd=repo.root)
        assert where.rc == 0 and where.json["running"] is False, (damaged, where)


def test_a_usage_error_is_one_line_as_every_error(repo):
    for argv, verb, said in [
        (["status", "--jsn"], "status", "No such option '--jsn'. Did you mean '--json'?"),
        (["claim"], "claim", "Missing argument 'PATHS...'."),
        (["ledger", "tail", "-n", "abc"], "ledger tail", "'abc' is not a valid integer"),
    ]:
        result = cli(*argv, cwd=repo.root)
        assert result.rc == 2 and result.out == "", (argv, result)
        assert result.err.startswith("lockstep: ") and result.err.count("\n") == 1 and said in result.err, (argv, result)
        assert f"{verb} --help" in result.err  # where to read more
    bare = cli("guard", cwd=repo.root)  # a group without its verb still shows its help
    assert bare.rc == 2 and "pre-commit" in bare.err and "Usage:" in bare.err


def test_a_detached_coordinator_that_cannot_start_says_why(repo, tmp_path):
    endpoint = f"ipc://{tmp_path}/missing/rpc.sock"
    said = cli("serve", "--detach", "--endpoint", endpoint, cwd=repo.root)
    assert said.rc == 2 and said.err.count("\n") == 1, said
    assert f"cannot listen on {endpoint}" in said.err and "coordinator.log" in said.err, said  # not only "see the log"
    as_json = cli("serve", "--detach", "--json", "--endpoint", endpoint, cwd=repo.root)
    assert as_json.rc == 2 and f"cannot listen on {endpoint}" in as_json.json["error"]["message"], as_json



def test_top_into_a_pipe_prints_one_frame_and_ends(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "src/app.py", cwd=repo.root).rc == 0
    shown = cli("top", cwd=repo.root, timeout=30)  # stdout is a pipe: the live view drew nothing, forever
    assert shown.rc == 0 and "src/app.py" in shown.out and "alice" in shown.out, shown
    assert "not a terminal" in shown.err


def test_closed_standard_descriptors_read_as_empty_and_write_nowhere(repo, coordinator, tmp_path):
    """Started with stdin, stdout or stderr closed, a verb behaves as with /dev/null there
    (it was a traceback where it read, asked isatty() or flushed), and a command `run`
    starts gets /dev/null on it, not whatever lockstep opened next on that descriptor."""
    coordinator(*FAST)
    pushed = _with_closed(0, "guard", "pre-push", "--json", "origin", "url", cwd=repo.root)
    assert pushed.rc == 0 and pushed.json["reason"] == "nothing to push", pushed
    hooked = _with_closed(0, "hook", "codex", cwd=repo.root)
    assert hooked.rc == 0 and "systemMessage" in hooked.out, hooked  # a warning, as for any unreadable input
    for wait in (["--wait", "5"], ["--wait=5"]):  # the fast path and click's
        claimed = _with_closed(2, "claim", "--agent", "alice", *wait, "src/app.py", cwd=repo.root)
        assert claimed.rc == 0 and claimed.out.startswith("granted src/app.py"), (wait, claimed)
    seen = tmp_path / "fds"
    script = f'for fd in 0 1; do echo "$fd $(readlink /proc/$$/fd/$fd)" >> {seen}; done'
    ran = _with_closed(1, "run", "--agent", "bob", "--", "sh", "-c", script, cwd=repo.other)
    assert ran.rc == 0, ran
    assert seen.read_text().splitlines()[1] == "1 /dev/null"


def test_guard_install_keeps_a_users_hook_that_runs_the_guard(repo):
    hook = repo.root / ".git" / "hooks" / "pre-commit"
    text = "#!/bin/sh\nmake lint || exit 1\nlockstep guard pre-commit\n"
    hook.write_text(text)
    installed = cli("guard", "install", "--json", cwd=repo.root)
    assert installed.rc == 0, installed
    assert hook.read_text() == text  # it was replaced by Lockstep's, `make lint` gone
    assert installed.json["kept"] == [str(hook.resolve())]
    assert installed.json["installed"] == [str((repo.root / ".git" / "hooks" / h).resolve()) for h in ("pre-push", "pre-merge-commit", "reference-transaction")]


def test_plan_status_of_an_unknown_job_is_not_found(repo, coordinator):
    coordinator(*FAST)
    unknown = cli("plan", "status", "9.99", cwd=repo.root)
    assert unknown.rc == 1 and "no plan 9.99" in unknown.err and unknown.out == "", unknown  # was "no plans yet", exit 0
    as_json = cli("plan", "status", "9.99", "--json", cwd=repo.root)
    assert as_json.rc == 1 and as_json.json["error"]["code"] == "not_found", as_json
    listed = cli("plan", "status", "--json", cwd=repo.root)
    assert listed.rc == 0 and listed.json == []


def test_run_of_an_empty_command_name_is_not_found(repo, coordinator):
    coordinator(*FAST)
    empty = cli("run", "--agent", "runner", "--", "", cwd=repo.root)
    assert empty.rc == 127 and empty.err == "lockstep run: cannot start '': an empty command name\n", empty  # was 126, EACCES


def test_a_removed_current_directory_is_bad_input_in_one_line(repo):
    gone = repo.root / "gone"
    gone.mkdir()
    for verb in (["status", "--json"], ["claim", "--agent", "alice", "x.py", "--json"], ["where", "--json"]):
        proc = subprocess.run(["sh", "-c", 'cd "$1" && rmdir "$1" && shift && exec "$@"', "sh", str(gone), *LOCKSTEP, *verb],
                              cwd=repo.root, env=env_for({"PYTHONPATH": str(PROJECT)}),  # no empty entry: that is the cwd
                              capture_output=True, text=True, timeout=60)
        gone.mkdir()  # for the next verb
        assert proc.returncode == 2 and "no longer exists" in proc.stdout and proc.stderr == "", (verb, proc)
        assert json.loads(proc.stdout)["error"]["code"] == "bad_path"


NOT_UTF8 = "bad\udcff.py"  # os.fsdecode(b"bad\xff.py"): a name of bytes that are not UTF-8


def test_run_exits_with_the_commands_status_when_its_arguments_are_not_utf8(repo, coordinator):
    coordinator(*FAST)
    ran = cli("run", "--agent", "runner", "--", sys.executable, "-c", "import sys; sys.exit(7)", NOT_UTF8, cwd=repo.root)
    assert ran.rc == 7 and "Traceback" not in ran.err, ran  # reporting the command line failed: exit 1, a traceback


def test_arguments_that_are_not_utf8_are_bad_input_in_one_line(repo, coordinator):
    coordinator(*FAST)
    for argv in (["claim", "--agent", "alice", NOT_UTF8], ["intent", "--agent", "alice", NOT_UTF8], ["send", "--to", "bob", NOT_UTF8]):
        said = cli(*argv, cwd=repo.root)
        assert said.rc == 2 and said.err == "lockstep: 'bad\\xff.py' is not UTF-8 text: Lockstep sends names and text as UTF-8 (rename such a file)\n", said
        as_json = cli(*argv, "--json", cwd=repo.root)
        assert as_json.rc == 2 and as_json.json["error"]["code"] == "bad_request", as_json
    assert holders(repo) == {}  # and the coordinator serves on


def _stage(root, paths: list[str]) -> None:
    for path in paths:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x\n")
    done = subprocess.run(["git", "add", "-A"], cwd=root, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr


def test_the_guard_checks_a_commit_of_any_size(repo, coordinator):
    """12,000 staged files name more than one request may carry: the guard failed with
    `message ... exceeds the cap` (exit 2), so no such commit could be made."""
    coordinator(*FAST)
    assert cli("claim", "--agent", "alice", "vendor/pkg59/", cwd=repo.root).rc == 0
    _stage(repo.other, [f"vendor/pkg{i // 200}/module_{i:06d}_{'x' * 30}.js" for i in range(12_000)])
    person = cli("guard", "pre-commit", "--json", cwd=repo.other, timeout=120)
    assert person.rc == 1 and "vendor/pkg59/" in person.json["reason"] and "held by alice" in person.json["reason"], person.out[:500]
    agent = cli("guard", "pre-commit", "--json", cwd=repo.other, env={"LOCKSTEP_AGENT": "bob"}, timeout=120)
    assert agent.rc == 1 and "alice" in agent.json["reason"], agent.out[:500]
    for holder in ("alice", "bob"):  # bob's intents claimed the batches before alice's folder
        assert cli("release", "--agent", holder, "--all", cwd=repo.root).rc == 0
    free = cli("guard", "pre-commit", "--json", cwd=repo.other, timeout=120)
    assert free.rc == 0 and free.json["allowed"] and len(free.json["files"]) == 12_000, free.out[:500]


def _summarised_status_held_by_bulk(repo, coordinator, agents) -> None:
    """16,000 claims of agent bulk (many/dNN/…): past STATUS_LIST_LIMIT, status lists none."""
    coordinator(*FAST)
    bulk = agents("bulk", repo.root)
    for start in range(0, 16_000, 2_000):
        granted = bulk.do("claim", paths=[f"many/d{i // 100}/f{i:06d}_{'y' * 40}.py" for i in range(start, start + 2_000)], timeout=60)
        assert granted.get("token"), granted
    assert cli("status", "--json", cwd=repo.root).json["summarised"]


def test_the_guard_sees_a_persons_commit_of_a_held_file_when_status_is_summarised(repo, coordinator, agents):
    """Over STATUS_LIST_LIMIT of claims the status lists none (a summary): the guard read
    that as nobody holding anything and let a person commit a held file."""
    _summarised_status_held_by_bulk(repo, coordinator, agents)
    _stage(repo.other, ["many/d7/f000700_" + "y" * 40 + ".py"])
    person = cli("guard", "pre-commit", "--json", cwd=repo.other, timeout=120)
    assert person.rc == 1 and "held by bulk" in person.json["reason"], person


def test_a_persons_big_commit_under_a_summarised_status_is_asked_folder_by_folder(repo, coordinator, agents):
    """Under a summarised status the guard asked the coordinator file by file: a person's
    commit of 100,000 files took ten minutes in the hook."""
    _summarised_status_held_by_bulk(repo, coordinator, agents)
    held = "many/d7/f000700_" + "y" * 40 + ".py"
    _stage(repo.other, [held, "many/d7/new.py", *(f"work/d{i // 100}/f{i}.py" for i in range(3_000))])

    def messages() -> int:
        return cli("status", "--json", cwd=repo.root).json["statistics"]["core"]["messages"]

    before = messages()
    person = cli("guard", "pre-commit", "--json", cwd=repo.other, timeout=120)
    assert person.rc == 1 and f"{held} (held by bulk)" in person.json["reason"], person.out[:500]
    assert "many/d7/new.py" not in person.json["reason"]
    asked = messages() - before - 1  # the status call itself
    assert asked < 100, f"{asked} requests for 3,002 files"


def test_too_many_paths_at_once_says_what_to_do(repo, coordinator):
    coordinator(*FAST)
    paths = [f"many/d{i // 100}/f{i:06d}_{'z' * 40}.py" for i in range(6_000)]
    said = cli("claim", "--agent", "alice", "--json", *paths, cwd=repo.root)
    assert said.rc == 2 and said.json["error"]["code"] == "too_large", said.out[:300]
    assert "name fewer paths at a time (or their folder, or a glob)" in said.json["error"]["message"]
    assert holders(repo) == {}
