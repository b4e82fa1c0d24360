"""Wire types: codec errors by code, and the catalogue in docs/protocol.md matches the code."""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from protocol import messages as m
from protocol.codec import decode_reply, decode_request, encode
from protocol.errors import ERROR_CODES, PeerError

CATALOGUE = (Path(__file__).resolve().parents[3] / "docs" / "protocol.md").read_text()
TAGGED = [m.Hello, m.Heartbeat, m.Watch, m.Claim, m.Release, m.Intent, m.Status, m.Fresh, m.Compact, m.Bye, m.Shutdown, m.Abandon,
          m.Check, m.Verify, m.Done, m.JobQuery, m.PlanRun, m.Wrote, m.TurnStart, m.Land, m.LandQuery, m.Accepted, m.Gate, m.JobReply, m.Compacted, m.Landing,
          m.Welcome, m.Granted, m.Refused, m.Decision, m.Released, m.StatusReply, m.Ok, m.Error, m.Publication,
          m.Enroll, m.Keys, m.Enrolled, m.KeysReply, m.Tasks, m.SendText, m.InboxQuery, m.TasksReply, m.InboxReply, m.Ran,
          m.WorkerReady, m.WorkerBeat, m.WorkProgress, m.WorkDone, m.WorkerBye, m.WorkerWelcome, m.Work, m.WorkCancel, m.WorkerPing, m.WorkerDismissed]
NESTED = [m.Conflict, m.AgentInfo, m.ClaimInfo, m.HoldInfo, m.JobInfo, m.ProbeRequest, m.StaleBase, m.MergeHoldInfo,
          m.LandConflict, m.LandCommit, m.KeyInfo, m.TaskInfo, m.MessageInfo]


def _section(heading: str) -> str:
    match = re.search(rf"^### `{re.escape(heading)}`\n(.*?)(?=^##)", CATALOGUE + "\n##", re.S | re.M)
    assert match, f"docs/protocol.md has no section for {heading}"
    return match.group(1)


def _field_table(section: str) -> str:
    """The rows of the section's first table (the one headed ``| field |``)."""
    lines = section[section.index("| field |") :].splitlines()
    return "\n".join(itertools.takewhile(lambda line: line.startswith("|"), lines))


def test_every_message_type_is_documented_with_exactly_its_fields():
    every_message = {cls for cls in vars(m).values() if isinstance(cls, type) and issubclass(cls, m.Message)}
    tagged_in_code = every_message - {m.Message, m.Request, m.Reply}  # the bases are never sent
    assert tagged_in_code == set(TAGGED), "a new message type: add it to TAGGED and to docs/protocol.md"
    for cls in TAGGED + NESTED:
        heading = cls.__struct_config__.tag or cls.__name__
        documented = set(re.findall(r"^\| `([a-z_]+)` \|", _field_table(_section(heading)), re.M))
        assert documented == set(cls.__struct_fields__), (heading, documented ^ set(cls.__struct_fields__))


def test_every_error_code_is_documented():
    for code in ERROR_CODES:
        assert f"| `{code}` |" in CATALOGUE, code


@pytest.mark.parametrize(
    "frame, code",
    [
        (b"", "malformed"),
        (b"\xc1", "malformed"),
        (encode([1, 2, 3]), "malformed"),
        (encode({"no": "type"}), "malformed"),
        (encode({"type": "nope"}), "unknown_type"),
        (encode({"type": "claim", "session": "s"}), "malformed"),
        (encode({"type": "claim", "session": "s", "paths": ["a"], "extra": 1}), "malformed"),
        (b"\x00" * (m.MAX_MESSAGE_BYTES + 1), "too_large"),
    ],
)
def test_bad_frames_raise_peer_errors_with_codes(frame, code):
    with pytest.raises(PeerError) as info:
        decode_request(frame)
    assert info.value.code == code and info.value.message


@given(st.binary(max_size=200))
def test_decoding_arbitrary_bytes_never_raises_anything_but_a_peer_error(frame):
    try:
        decode_request(frame)
    except PeerError:
        pass


def test_round_trip_and_defaults_are_omitted_on_the_wire():
    claim = m.Claim(session="1.1", paths=["src/"], req=9)
    assert decode_request(encode(claim)) == claim
    assert msgspec.msgpack.decode(encode(claim)) == {"type": "claim", "req": 9, "session": "1.1", "paths": ["src/"]}
    reply = m.Granted(token=3, patterns=["src/"], warnings=[m.Conflict(holder="a", pattern="src/x", access="shared")])
    assert decode_reply(encode(reply)) == reply
