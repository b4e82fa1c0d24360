"""``--since`` of `ledger tail` and `report`: a duration ago or a date-time."""

from __future__ import annotations

import pytest

from agents.cli.output import Failure
from agents.cli.report import parse_since


def test_a_duration_ago_is_now_minus_it():
    assert parse_since("90s", now=1000.0) == 910.0
    assert parse_since("1d", now=100_000.0) == 100_000.0 - 86400


@pytest.mark.parametrize("text", ["99999999999999999999d", "9" * 400 + "d", "99999999999999999999h"])
def test_longer_ago_than_the_epoch_is_from_the_beginning(text):
    # a time before 1970 (or -inf) crashed the report in time.localtime
    assert parse_since(text, now=1000.0) == 0.0


@pytest.mark.parametrize("text", ["soon", "nan", "inf", "-5m", "1e400s"])
def test_anything_else_is_bad_input(text):
    with pytest.raises(Failure) as info:
        parse_since(text, now=1000.0)
    assert info.value.exit_code == 2
