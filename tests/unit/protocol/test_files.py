"""protocol.files: a file anyone with the worktree controls is read only if it is a
regular file, and only up to a limit (real files, FIFOs and devices)."""

from __future__ import annotations

import hashlib
import os
import threading

import pytest

from protocol.files import FileTooLarge, NotRegularFile, read_regular, sha256_regular


def test_a_regular_file_is_read_whole_up_to_its_limit(tmp_path):
    path = tmp_path / "a.txt"
    path.write_bytes(b"x" * 1000)
    assert read_regular(path, 1000) == b"x" * 1000
    with pytest.raises(FileTooLarge) as raised:
        read_regular(path, 999)
    assert raised.value.size == 1000 and "larger than 999 bytes" in str(raised.value)
    assert sha256_regular(path) == hashlib.sha256(b"x" * 1000).hexdigest()


def test_a_symlink_to_an_endless_device_is_refused_unread(tmp_path):
    link = tmp_path / "notes.md"
    link.symlink_to("/dev/zero")
    for read in (lambda: read_regular(link, 1 << 30), lambda: sha256_regular(link)):
        with pytest.raises(NotRegularFile, match="a device, not a file"):
            read()


def test_a_fifo_is_refused_without_waiting_for_a_writer(tmp_path):
    fifo = tmp_path / "plan.toml"
    os.mkfifo(fifo)
    outcome: list[BaseException] = []

    def read() -> None:  # a blocking open would wait here for ever: in a thread, with a deadline
        try:
            read_regular(fifo, 100)
        except BaseException as exc:
            outcome.append(exc)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout=10)
    assert not reader.is_alive(), "read_regular blocked on a FIFO"
    assert isinstance(outcome[0], NotRegularFile) and "a FIFO, not a file" in str(outcome[0])


def test_a_directory_and_a_missing_path_are_os_errors_callers_already_know(tmp_path):
    with pytest.raises(NotRegularFile) as raised:
        read_regular(tmp_path, 100)
    assert isinstance(raised.value, OSError) and "a directory" in str(raised.value)
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing", 100)
