"""`status --agent` / `--path`, and a summary instead of an unbounded list (issue 7,
failure 6: `status` at 100k claims was an 11 MB reply).  Real coordinator, real CLI."""

from __future__ import annotations

import json

from protocol import messages as m
from protocol.codec import encode

from .conftest import cli
from .test_bad_input import RawClient

STEADY = ("--heartbeat", "1", "--liveness", "30")


def _status(repo, *args: str) -> dict:
    result = cli("status", "--json", *args, cwd=repo.root)
    assert result.rc == 0, result
    return result.json


def test_status_filters_by_agent_and_by_path(repo, coordinator):
    coordinator(*STEADY)
    assert cli("claim", "src/app.py", "src/api/x.py", "--agent", "alice", cwd=repo.root).rc == 0
    assert cli("claim", "docs/guide.md", "--agent", "bob", cwd=repo.other).rc == 0

    alice = _status(repo, "--agent", "alice")
    assert [a["name"] for a in alice["agents"]] == ["alice"]
    assert sorted(c["pattern"] for c in alice["claims"]) == ["src/api/x.py", "src/app.py"]
    assert alice["counts"] == {"agents": 1, "claims": 2, "holds": 0, "merge_holds": 0}
    assert alice["summarised"] is False

    api = _status(repo, "--path", "src/api/**")
    assert [(c["pattern"], c["holder"]) for c in api["claims"]] == [("src/api/x.py", "alice")]
    docs = _status(repo, "--path", "docs/*.md", "--agent", "bob")
    assert [(c["pattern"], c["holder"]) for c in docs["claims"]] == [("docs/guide.md", "bob")]
    assert _status(repo, "--path", "docs/**", "--agent", "alice")["claims"] == []
    assert _status(repo, "--agent", "nobody")["counts"]["agents"] == 0

    text = cli("status", "--path", "src/api/**", cwd=repo.root)
    assert text.rc == 0 and "src/api/x.py" in text.out and "docs/guide.md" not in text.out

    bad = cli("status", "--agent", "../evil", "--json", cwd=repo.root)
    assert bad.rc == 2 and json.loads(bad.out)["error"]["code"] == "bad_agent"


def test_status_over_the_size_limit_is_a_summary_that_says_how_to_narrow_it(repo, coordinator):
    coordinator(*STEADY)
    long = "/".join(["d" * 60] * 6)  # ~370 characters a path: 3,000 claims are over 1 MiB
    raw = RawClient(json.loads((repo.state_dir / "coordinator.json").read_text())["endpoints"][0])
    try:
        raw.send(encode(m.Hello(agent="hoarder", req=1)))
        session = raw.reply().session
        for start in range(0, 3000, 500):
            paths = [f"{long}/f{i}.py" for i in range(start, start + 500)]
            raw.send(encode(m.Claim(session=session, paths=paths, req=2 + start)))
            assert isinstance(raw.reply(timeout_ms=20_000), m.Granted)
    finally:
        raw.close()
    assert cli("claim", "src/app.py", "--agent", "alice", cwd=repo.root).rc == 0

    whole = cli("status", "--json", cwd=repo.root)
    assert whole.rc == 0 and len(whole.out) < 200_000, len(whole.out)
    summary = whole.json
    assert summary["summarised"] is True and summary["claims"] == []
    assert summary["counts"]["claims"] == 3001
    assert summary["claims_by_holder"] == {"hoarder": 3000, "alice": 1}
    assert "--agent" in summary["note"] and "--path" in summary["note"]
    assert {a["name"] for a in summary["agents"]} == {"hoarder", "alice"}

    text = cli("status", cwd=repo.root)
    assert text.rc == 0 and "note:" in text.out and "hoarder" in text.out

    narrowed = _status(repo, "--agent", "alice")
    assert narrowed["summarised"] is False and [c["pattern"] for c in narrowed["claims"]] == ["src/app.py"]
    some = _status(repo, "--path", f"{long}/f1?.py")
    assert some["summarised"] is False and len(some["claims"]) == 10
