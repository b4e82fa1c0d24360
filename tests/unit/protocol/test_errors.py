"""protocol.errors: one mapping from error codes to exit codes, as the README documents
(0 ok, 1 refused / blocked / failed, 2 usage or bad input, 3 coordinator unreachable)."""

from __future__ import annotations

import pytest

from protocol.errors import (
    BAD_INPUT_CODES,
    ERROR_CODES,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    EXIT_USAGE,
    LocalError,
    LockstepError,
    PeerError,
    UsageError,
    exit_code_for,
    exit_code_of,
)

EXPECTED = {
    "malformed": EXIT_USAGE,
    "unknown_type": EXIT_USAGE,
    "version": EXIT_USAGE,
    "too_large": EXIT_USAGE,
    "bad_path": EXIT_USAGE,
    "bad_agent": EXIT_USAGE,
    "bad_request": EXIT_USAGE,
    "wrong_repo": EXIT_USAGE,
    "unknown_session": EXIT_REFUSED,
    "session_expired": EXIT_REFUSED,
    "agent_live": EXIT_REFUSED,
    "unreachable": EXIT_UNREACHABLE,
    "internal": EXIT_REFUSED,
    "unavailable": EXIT_REFUSED,  # the ledger cannot be written: refused until it can
    "forbidden": EXIT_REFUSED,  # a remote key acting as another name, or an operator verb
    "revoked": EXIT_REFUSED,
    "no_worker": EXIT_REFUSED,
    "not_found": EXIT_REFUSED,
    "refused": EXIT_REFUSED,  # e.g. a task another agent took
}


def test_every_wire_error_code_has_its_documented_exit_code():
    assert set(EXPECTED) == set(ERROR_CODES)
    for code, status in EXPECTED.items():
        assert exit_code_for(code) == status, code


def test_bad_input_codes_are_wire_codes_or_our_own_usage():
    assert BAD_INPUT_CODES <= set(ERROR_CODES) | {"usage"}
    assert exit_code_for("usage") == EXIT_USAGE


@pytest.mark.parametrize("code", ["no_ledger", "serve_failed", "", "something new"])
def test_any_other_code_is_a_refusal(code):
    assert exit_code_for(code) == EXIT_REFUSED


def test_a_usage_error_exits_2_whatever_its_code():
    assert exit_code_of(UsageError("bad flag")) == EXIT_USAGE
    assert exit_code_of(UsageError("bad key", code="config")) == EXIT_USAGE


def test_errors_with_a_code_exit_by_it_and_the_rest_with_1():
    assert exit_code_of(PeerError("bad_path", "outside")) == EXIT_USAGE
    assert exit_code_of(PeerError("agent_live", "taken")) == EXIT_REFUSED
    assert exit_code_of(LocalError("a bug")) == EXIT_REFUSED
    assert exit_code_of(LockstepError("plain")) == EXIT_REFUSED
