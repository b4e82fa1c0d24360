"""Merge holds: a released path stays refused to others until its commits reach main.

Theory
------
* Releasing a claim (explicitly, at session end, or when a session goes stale) says
  "I am done writing", not "my change is in main".  If the agent's branch has commits
  touching the path that the integration branch does not contain yet, another agent
  that edits the path from main now will conflict with them at merge time.  So such a
  path becomes a *merge hold*: refused to everyone but its holder, in every mode.
* What to hold comes from the integration index's ``unmerged`` map (per agent branch:
  path -> the branch's commits touching it that main lacks), kept current by the shell
  when refs move.  Only those concrete paths are held, whatever pattern was released.
* Only files whose content on main differs from the branch's are held: a file main
  already has as the branch has it waits for nothing.
* A hold ends when every one of its commits is reachable from the integration branch
  (``merge.freed``, reason "merged"), when main has the held file exactly as the
  branch has it (reason "main has its changes": a squash merge or a rebase merge
  brings the changes without the commits; the branch's version is the file at the
  branch's tip, or at the newest held commit once the branch is deleted), or when an
  operator abandons it (``release --force PATH``, ``abandon BRANCH``: reason
  "abandoned").  The content rule is per file: a main that has only some of the
  branch's changes to a file (one commit of two cherry-picked) keeps it held.  Nothing else ends it: not
  the session's end, not a coordinator restart (holds are ledger state and part of the
  snapshot).
* Holds are applied by the registry from ``merge.held`` / ``merge.freed`` records
  (registry.py, Rule 1); this module holds the shapes and the read-only questions.
"""

from __future__ import annotations

from dataclasses import dataclass

from protocol.messages import Conflict
from protocol.paths import Pattern, escape


@dataclass(eq=False)
class MergeHold:
    path: Pattern  # a concrete file
    holder: str
    branch: str  # refs/heads/NAME of the holder's worktree
    commits: tuple[str, ...]  # the holder's commits touching it that main lacked
    target: str = "main"  # the integration branch's short name

    @property
    def short_branch(self) -> str:
        return self.branch.removeprefix("refs/heads/")

    def describe(self) -> str:
        n = len(self.commits)
        where = f"branch {self.short_branch}" if self.branch.startswith("refs/") else f"detached HEAD {self.branch}"
        return (
            f"held until {self.holder}'s {n} commit{'s' if n != 1 else ''} touching it reach {self.target} "
            f"({where}); merge it, or an operator runs `lockstep abandon {self.short_branch}`"
        )


def conflict(hold: MergeHold) -> Conflict:
    return Conflict(holder=hold.holder, pattern=hold.path.text, access="merge-hold", reason=hold.describe())


def held_paths(unmerged: dict[str, tuple[str, ...]], patterns: list[Pattern]) -> dict[str, tuple[str, ...]]:
    """The paths of ``unmerged`` (git's file names -> commits) that the released
    ``patterns`` cover, each as the pattern naming exactly that file (``escape``): a
    file named ``a[1].py`` is held as ``a\\[1].py``, never as the glob matching ``a1.py``,
    and a literal claim on it (text ``a\\[1].py``) covers it."""
    literal = {"/".join(p.names) for p in patterns if p.is_literal}  # the file names, escapes undone
    globs = [p for p in patterns if not p.is_literal]
    found = {}
    for path, commits in unmerged.items():
        if path in literal or any(p.matches(path) for p in globs):
            found[escape(path)] = commits
    return found
