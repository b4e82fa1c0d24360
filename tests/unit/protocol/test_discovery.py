"""protocol.discovery: every worktree of a repository finds the same state directory and
coordinator; the state file round-trips; endpoints are private to the repository and
only ipc or loopback tcp."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from protocol import discovery
from protocol.discovery import (
    STATE_FILE,
    AlreadyServing,
    Place,
    acquire_serve_lock,
    check_endpoint,
    default_endpoints,
    discover_endpoint,
    ensure_state_dir,
    locate,
    read_state,
    remove_state,
    write_state,
)
from protocol.errors import PeerError


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, timeout=30)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    monkeypatch.delenv("LOCKSTEP_ENDPOINT", raising=False)
    root = tmp_path / "repo"
    (root / "src" / "deep").mkdir(parents=True)
    (root / "src" / "deep" / "a.py").write_text("a = 1\n")
    _git(root, "init", "-q", "-b", "main")
    _git(root, "-c", "user.email=t@example.com", "-c", "user.name=t", "add", ".")
    _git(root, "-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "-m", "init")
    _git(root, "worktree", "add", "-q", str(tmp_path / "wt-b"))
    return root


# ---------------------------------------------------------------------- locate


def test_locate_from_the_top_of_a_worktree(repo: Path):
    place = locate(repo)
    assert place == Place(worktree=repo.resolve(), repo_id=str((repo / ".git").resolve()),
                          state_dir=(repo / ".git" / "lockstep").resolve(), in_git=True)


def test_locate_from_a_subdirectory_finds_the_top(repo: Path, monkeypatch):
    assert locate(repo / "src" / "deep") == locate(repo)
    monkeypatch.chdir(repo / "src")
    assert locate() == locate(repo)


def test_every_worktree_shares_the_repository_and_its_state_directory(repo: Path):
    main, other = locate(repo), locate(repo.parent / "wt-b" / "src")
    assert other.worktree == (repo.parent / "wt-b").resolve()
    assert (other.repo_id, other.state_dir) == (main.repo_id, main.state_dir)


def test_outside_git_the_directory_is_the_repository(tmp_path: Path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    place = locate(plain)
    assert place == Place(worktree=plain.resolve(), repo_id=str(plain.resolve()),
                          state_dir=plain.resolve() / ".lockstep", in_git=False)


def test_a_directory_that_does_not_exist_is_located_as_outside_git(tmp_path: Path):
    place = locate(tmp_path / "missing")
    assert not place.in_git and place.state_dir == (tmp_path / "missing" / ".lockstep").resolve()


def test_the_state_directory_is_private(repo: Path):
    state_dir = ensure_state_dir(locate(repo))
    assert state_dir.is_dir() and stat.S_IMODE(state_dir.stat().st_mode) == 0o700
    os.chmod(state_dir, 0o755)
    ensure_state_dir(locate(repo))  # tightened again
    assert stat.S_IMODE(state_dir.stat().st_mode) == 0o700


# ---------------------------------------------------------------------- the state file


def test_the_state_file_round_trips_and_is_private(tmp_path: Path):
    info = {"pid": 1234, "endpoints": ["ipc:///x/rpc.sock"], "pub": ["ipc:///x/pub.sock"]}
    write_state(tmp_path, info)
    assert read_state(tmp_path) == info
    assert stat.S_IMODE((tmp_path / STATE_FILE).stat().st_mode) == 0o600
    assert not list(tmp_path.glob("*.tmp"))  # written by rename, nothing left behind
    write_state(tmp_path, {**info, "pid": 99})
    assert read_state(tmp_path)["pid"] == 99


@pytest.mark.parametrize(
    "content",
    # missing, not JSON, or not the coordinator's shape (a pid, lists of endpoint strings)
    [None, "", "{not json", "[1, 2", "[]", '{"endpoints": []}', '{"pid": "1"}', '{"pid": 1, "endpoints": "ipc"}',
     '{"pid": 1, "endpoints": [5]}', '{"pid": 1, "pub": [null]}'],
)
def test_a_missing_or_broken_state_file_reads_as_none(tmp_path: Path, content):
    if content is not None:
        (tmp_path / STATE_FILE).write_text(content)
    assert read_state(tmp_path) is None


def test_remove_state_removes_only_its_own_coordinator(tmp_path: Path):
    write_state(tmp_path, {"pid": 10, "endpoints": []})
    remove_state(tmp_path, pid=11)  # another coordinator's file: kept
    assert read_state(tmp_path)["pid"] == 10
    remove_state(tmp_path, pid=10)
    assert not (tmp_path / STATE_FILE).exists()
    remove_state(tmp_path, pid=10)  # nothing left: no error


def test_the_serve_lock_admits_one_coordinator(tmp_path: Path):
    write_state(tmp_path, {"pid": 42, "endpoints": ["ipc:///y"]})
    fd = acquire_serve_lock(tmp_path)
    try:
        with pytest.raises(AlreadyServing) as caught:
            acquire_serve_lock(tmp_path)
        assert caught.value.info["pid"] == 42  # says who serves
    finally:
        os.close(fd)
    os.close(acquire_serve_lock(tmp_path))  # free again once the holder is gone


# ---------------------------------------------------------------------- endpoints


def test_short_state_directories_use_sockets_inside_them(tmp_path: Path):
    rpc, pub = default_endpoints(tmp_path)
    assert (rpc, pub) == (f"ipc://{tmp_path}/rpc.sock", f"ipc://{tmp_path}/pub.sock")


def test_deep_state_directories_get_a_private_name_each(tmp_path: Path):
    deep_a = tmp_path / ("a" * 60) / ("b" * 60) / "lockstep"
    deep_b = tmp_path / ("a" * 60) / ("c" * 60) / "lockstep"
    a, b = default_endpoints(deep_a), default_endpoints(deep_b)
    assert all(len(e) <= len("ipc://") + discovery.IPC_PATH_LIMIT for e in (*a, *b))
    assert a[0] != a[1] and a != b
    assert a == default_endpoints(deep_a)  # stable: every client computes the same name


@pytest.mark.parametrize(
    "endpoint",
    ["ipc:///tmp/x.sock", "tcp://127.0.0.1:5555", "tcp://127.8.9.10:1", "tcp://[::1]:5555",
     "tcp://localhost:5555"],
)
def test_ipc_and_loopback_tcp_are_accepted(endpoint: str):
    assert check_endpoint(endpoint) == endpoint


@pytest.mark.parametrize(
    "endpoint",
    ["tcp://0.0.0.0:5555", "tcp://10.0.0.1:5555", "tcp://[::]:5555", "tcp://example.com:80", "tcp://*:5555",
     "http://127.0.0.1:80", "inproc://x", "", "127.0.0.1:5555", "ipc://@abstract",  # abstract: no file permissions
     "ipc://", "tcp://localhost", "tcp://127.0.0.1:abc", "tcp://127.0.0.1:", "tcp://:5555"],  # serve: a traceback, or a hang
)
def test_anything_else_is_refused_as_bad_input(endpoint: str):
    with pytest.raises(PeerError) as caught:
        check_endpoint(endpoint)
    assert caught.value.code == "bad_request"


@pytest.mark.parametrize("endpoint", ["tcp://127.0.0.1:99999", "tcp://127.0.0.1:65536", "tcp://localhost:123456789012345678901"])
def test_a_port_past_65535_is_refused(endpoint: str):
    # zmq took tcp://127.0.0.1:99999 and the client waited for an answer (exit 3)
    for to_connect in (False, True):
        with pytest.raises(PeerError, match=r"is not a tcp port to .* \(1 to 65535\)") as caught:
            check_endpoint(endpoint, to_connect=to_connect)
        assert caught.value.code == "bad_request"


def test_port_0_is_for_serving_not_for_connecting():
    assert check_endpoint("tcp://127.0.0.1:0") == "tcp://127.0.0.1:0"  # serve: the system picks a port
    assert check_endpoint("tcp://127.0.0.1:65535", to_connect=True) == "tcp://127.0.0.1:65535"
    with pytest.raises(PeerError, match="port 0 is not a tcp port to connect to"):
        check_endpoint("tcp://127.0.0.1:0", to_connect=True)


def test_the_endpoint_comes_from_the_flag_then_the_environment_then_the_state_file(repo: Path, monkeypatch):
    place = locate(repo)
    assert discover_endpoint(place) is None  # nothing runs
    ensure_state_dir(place)
    write_state(place.state_dir, {"pid": 1, "endpoints": ["ipc:///from/state"]})
    assert discover_endpoint(place) == "ipc:///from/state"
    assert discover_endpoint(locate(repo.parent / "wt-b")) == "ipc:///from/state"  # any worktree finds it
    monkeypatch.setenv("LOCKSTEP_ENDPOINT", "tcp://127.0.0.1:7000")
    assert discover_endpoint(place) == "tcp://127.0.0.1:7000"
    assert discover_endpoint(place, "ipc:///flag") == "ipc:///flag"
    with pytest.raises(PeerError):
        discover_endpoint(place, "tcp://192.168.1.1:1")  # an override is checked too


def test_a_state_file_without_endpoints_finds_nothing(repo: Path):
    place = locate(repo)
    ensure_state_dir(place)
    (place.state_dir / STATE_FILE).write_text(json.dumps({"pid": 1, "endpoints": []}))
    assert discover_endpoint(place) is None
