"""Input checked like git: each of these was accepted (or misread) before and is now one
clear line and exit 2; and messages that say what to do next."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import LOCKSTEP, cli, env_for, status

FAST = ("--heartbeat", "0.2", "--liveness", "3", "--lock-delay", "1")


def _one_line_usage(result, *words: str) -> None:
    assert result.rc == 2, result
    assert result.err.count("\n") == 1 and result.err.startswith("lockstep: "), result.err
    for word in words:
        assert word in result.err, (word, result.err)


def test_release_all_with_paths_is_refused_not_a_release_of_everything(repo, coordinator):
    coordinator(*FAST)
    assert cli("claim", "--agent", "c", "src/app.py", "src/x.py", cwd=repo.root).rc == 0
    _one_line_usage(cli("release", "--all", "src/x.py", "--agent", "c", cwd=repo.root), "--all")
    assert {c["pattern"] for c in status(repo)["claims"]} == {"src/app.py", "src/x.py"}  # nothing released


def test_checks_of_paths_outside_the_repository_are_bad_input(repo, coordinator):
    coordinator(*FAST)
    _one_line_usage(cli("check", "write", "/etc/passwd", "--sha256", "0" * 64, cwd=repo.root), "/etc/passwd", "outside")
    _one_line_usage(cli("check", "build", "/tmp", cwd=repo.root), "/tmp", "outside")
    _one_line_usage(cli("check", "build", "../..", cwd=repo.root / "src"), "outside")
    assert cli("check", "build", "src", cwd=repo.root).rc in (0, 1)  # inside: judged, not refused


def test_claim_for_a_pid_that_does_not_exist_is_one_line(repo, coordinator):
    coordinator(*FAST)
    _one_line_usage(cli("claim", "--agent", "p", "--pid", "999999999", "src/app.py", cwd=repo.root), "999999999", "no such process")
    assert not status(repo)["agents"]  # no session was opened


def test_a_bad_timeout_in_the_environment_is_bad_input(repo, coordinator):
    coordinator(*FAST)
    _one_line_usage(cli("status", cwd=repo.root, env={"LOCKSTEP_TIMEOUT": "abc"}), "LOCKSTEP_TIMEOUT")
    _one_line_usage(cli("claim", "--agent", "t", "src/app.py", cwd=repo.root, env={"LOCKSTEP_TIMEOUT": "-1"}), "LOCKSTEP_TIMEOUT")
    as_json = cli("status", "--json", cwd=repo.root, env={"LOCKSTEP_TIMEOUT": "abc"})
    assert as_json.rc == 2 and as_json.json["error"]["code"] == "usage"


def test_a_timeout_longer_than_zeromq_polls_at_once_works(repo, coordinator):
    # a month in milliseconds is past zmq_poll's C int: OverflowError, a traceback
    coordinator(*FAST)
    assert cli("status", "--json", cwd=repo.root, env={"LOCKSTEP_TIMEOUT": str(31 * 86400)}).rc == 0
    assert cli("claim", "--agent", "t", "src/app.py", cwd=repo.root, env={"LOCKSTEP_TIMEOUT": "99999999999"}).rc == 0


def test_a_duration_flag_that_is_nan_infinite_or_negative_is_bad_input(repo, coordinator):
    # float() reads all of these: --wait nan crashed in time.sleep, --ttl inf was granted
    coordinator(*FAST)
    assert cli("claim", "--agent", "b", "src/app.py", cwd=repo.root).rc == 0
    for flag, value in (("--wait", "nan"), ("--wait", "-5"), ("--ttl", "1e309"), ("--ttl", "inf")):
        _one_line_usage(cli("claim", "--agent", "c", "src/app.py", flag, value, cwd=repo.root), flag, "not a duration")
    _one_line_usage(cli("ledger", "compact", "--keep", "inf", cwd=repo.root), "--keep", "not a duration")
    assert [c["holder"] for c in status(repo)["claims"]] == ["b"]


def test_an_integer_past_64_bits_is_bad_input_not_a_traceback(repo, coordinator):
    # Python parses any integer; msgspec, os.kill and SQLite then overflowed in a traceback
    coordinator(*FAST)
    big = str(2**70)
    for argv in (("intent", "src/app.py", "--token", big), ("claim", "src/app.py", "--pid", big),
                 ("claim", "src/app.py", "--pid", str(2**40)), ("tasks", "take", big), ("ledger", "tail", "-n", big)):
        result = cli(*argv, "--agent", "t", "--json", cwd=repo.root) if argv[0] != "ledger" else cli(*argv, "--json", cwd=repo.root)
        assert result.rc == 2 and result.json["error"]["code"] in ("usage", "bad_request"), (argv, result)
        assert "Traceback" not in result.err, (argv, result.err)
    assert not status(repo)["claims"]


def test_a_request_past_the_frame_limit_is_too_large_not_unreachable(repo, coordinator):
    # past HARD_FRAME_LIMIT the coordinator's socket drops the connection unanswered: the
    # client waited out its timeout and said "no answer from the coordinator" (exit 3)
    coordinator(*FAST)
    paths = [f"d{i}/" + "a" * 3990 for i in range(300)]  # 1.2 MB, each argument under the OS's limit
    result = cli("claim", "--agent", "t", *paths, "--json", cwd=repo.root)
    assert result.rc == 2 and result.json["error"]["code"] == "too_large", result
    assert not status(repo)["claims"]


def test_an_endpoint_zeromq_cannot_parse_is_bad_input(repo):
    # it passed the scheme check, then zmq's connect raised in a traceback (exit 1)
    for endpoint in ("tcp://localhost", "tcp://127.0.0.1:abc", "ipc://", "tcp://127.0.0.1:*"):
        _one_line_usage(cli("status", "--endpoint", endpoint, cwd=repo.root), endpoint)
        _one_line_usage(cli("claim", "--agent", "e", "src/app.py", cwd=repo.root, env={"LOCKSTEP_ENDPOINT": endpoint}), endpoint)
    _one_line_usage(cli("status", "--endpoint", "tcp://127.0.0.1:*", cwd=repo.root), "cannot connect")  # a port to bind, not to reach


def test_a_check_timeout_that_is_not_a_positive_number_is_bad_input(repo):
    # it was sent on, and the job came back "fail" (exit 1) naming the timeout
    for value in ("nan", "inf", "0", "-1"):
        _one_line_usage(cli("check", "build", "src", "--timeout", value, cwd=repo.root), "timeout", value.lstrip("-"))


def test_status_works_from_inside_the_git_directory(repo, coordinator):
    coordinator(*FAST)
    inside = cli("status", "--json", cwd=repo.root / ".git")
    assert inside.rc == 0, inside
    assert cli("where", "--json", cwd=repo.root / ".git" / "objects").json["state_dir"] == str(repo.state_dir)


def test_braces_are_refused_with_the_paths_to_name_instead(repo, coordinator):
    coordinator(*FAST)
    _one_line_usage(cli("claim", "--agent", "b", "src/{a,b}.py", cwd=repo.root), "not expanded", "src/a.py src/b.py")
    _one_line_usage(cli("intent", "--agent", "b", "src/{a,b}.py", cwd=repo.root), "not expanded")
    assert not status(repo)["claims"]


def test_a_second_detached_serve_names_the_running_one_and_leaves_its_log_alone(repo, coordinator):
    first = coordinator(*FAST)
    log = repo.state_dir / "coordinator.log"
    before = log.read_bytes() if log.exists() else b""
    second = subprocess.run([*LOCKSTEP, "serve", "--detach"], cwd=repo.other, env=env_for(), capture_output=True, text=True, timeout=30)
    assert second.returncode == 1
    assert f"already serving {repo.root / '.git'} (pid {first.pid}, since " in second.stderr, second.stderr
    assert log.read_bytes()[: len(before)] == before and b"already" not in log.read_bytes()[len(before):]
    as_json = cli("serve", "--detach", "--json", cwd=repo.root)
    assert as_json.rc == 1 and as_json.json["error"]["code"] == "already_serving"


def test_verify_after_the_loop_limit_names_new_turn(repo, coordinator):
    (repo.root / "lockstep.toml").write_text(
        '[verify]\nmax_repair_loops = 1\n\n' f'[checks.test]\ncmd = "{sys.executable} -c \'import sys; sys.exit(1)\'"\n'
    )
    coordinator(*FAST)
    assert cli("verify", "--agent", "dev", cwd=repo.root).rc == 1
    stopped = cli("verify", "--agent", "dev", "--json", cwd=repo.root)
    assert stopped.rc == 1 and stopped.json["verdict"] == "escalate"
    assert "lockstep verify --new-turn" in stopped.json["reason"]
    assert json.loads(cli("verify", "--agent", "dev", "--new-turn", "--json", cwd=repo.root).out)["verdict"] == "fail"
