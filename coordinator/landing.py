"""The merge queue: branches land on the integration branch one at a time, in order,
and only as a commit that merged cleanly and passed the checks.

Theory
------
The rule ("not rocket science"): the integration branch only ever moves to a commit
that merged without conflicts and whose merged tree passed the repository's checks.
Per integration branch one landing runs at a time, first in, first out:

1. **Pre-flight.** Is the branch still at the commit it was queued at (else ``stale``)?
   Merge it onto the integration tip in memory (``git merge-tree --write-tree``: no
   working tree is touched).  Conflicts refuse it (``conflict``), naming each file's
   hunks and the integration commits that changed the file since the branch forked,
   with the agents whose landings brought them.
2. **Verify.** The merged commit is checked out in the coordinator's own scratch
   worktree (under its state directory, never an agent's) and the repository's
   ``[checks]`` (as the merged tree defines them; autofix checks excluded: a landing
   never rewrites what it verifies) run in the probe pool.  A failure refuses it
   (``failed``, failing checks first).
3. **Move.** ``git update-ref REF NEW OLD``: the branch moves only if it is still where
   the pre-flight found it.  A human who pushed meanwhile is never overwritten: the
   landing goes round again from the pre-flight, still first in the queue.  If the
   integration branch is checked out in a worktree, that checkout moves with it when
   clean (``git read-tree -m -u OLD NEW``); with local changes the landing is refused
   (``blocked``) before anything moves.

Every git call has a deadline (``[land] git_timeout``, ``landgit.Git``): a hook that
never returns would otherwise hold the queue, and every landing behind it, for good.
Past it git and its hooks are ended and the landing is refused ``blocked`` naming the
command; the branch did not move (a ``reference-transaction`` hook stuck after the move
leaves it landed, its checkout brought along; a checkout that could not follow puts
the branch back, as for any failed ``read-tree``).

**Batches** (``[land] batch = N``): a round takes up to N landings from the head of
the queue and merges them in memory one onto the other, in order (a landing that merges
onto the integration branch but not onto a batch mate waits for the next round); one
verify runs on the last merge commit.  A pass moves the branch to it: every landing of
the batch lands at once, each as the merge commit that brought it.  A failure bisects
the chain of merge commits for the first one that fails (a prefix that passes was
verified, so the branch may move to it): the landing that broke it is refused
``failed``, those before it land, those after it go round again, still first in the
queue.  N = 1 is the one-at-a-time queue above.

Every stage is a ledger record (``land.queued``, ``land.preflight``,
``land.verifying``, ``land.requeued``, ``land.landed`` / ``land.refused``) and a
publication; a coordinator restarted mid-queue reads the landings queued and not
decided, and runs them again in their order (a landing whose branch already reached the
integration branch is recognised as landed).  On ``land.landed`` the core frees the
agent's claims and merge holds on the files the landing changed (core.land_finished).
"""

from __future__ import annotations

import json
import logging
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import trio

from ledger import Ledger
from ledger import records as rec
from probes.config import ConfigError
from probes.model import ProbeError, ProbeResult
from protocol import messages as m
from protocol.errors import PeerError, UsageError

from .effects import Effect, Send, StartJob
from .landgit import LANDED_COMMITS_KEPT, Git, GitFailed

if TYPE_CHECKING:
    from .core import Core
    from .gitrefs import RefWatcher
    from .jobs import Apply, JobRunner

log = logging.getLogger("lockstep")

CLONE_REFS = "refs/lockstep/clones/"  # remote clones' branches, fetched from the bundles their landings sent
MAX_ATTEMPTS = 5  # lost compare-and-swaps before a landing is refused (someone pushes non-stop)
KEEP_DECIDED = 500  # decided landings kept for queries
MEMORY_OF_AUTHORS = 20_000  # integration commits whose landing agent is remembered


@dataclass
class Entry:
    job: str
    agent: str | None
    session: str | None
    branch: str  # refs/heads/NAME
    head: str
    target: str  # refs/heads/NAME of the integration branch
    cwd: str = ""
    venv: str = ""
    bundle: bytes = b""  # a remote clone's branch, sent with the request (fetched at the pre-flight)
    clone_ref: str = ""  # the private ref its bundle was fetched into, deleted once it is decided
    queued_at: float = field(default_factory=time.monotonic)
    started_at: float | None = None
    attempts: int = 0  # rounds it went through the pre-flight
    lost: int = 0  # compare-and-swaps it lost (the integration branch moved under it)
    landing: m.Landing | None = None
    view: Any = None  # the JobView its check results stream into

    @property
    def short_branch(self) -> str:
        return self.branch.removeprefix("refs/heads/")

    @property
    def short_target(self) -> str:
        return self.target.removeprefix("refs/heads/")


class Refusal(Exception):
    """A landing's verdict other than ``landed``."""

    def __init__(self, verdict: str, reason: str, **details: Any) -> None:
        super().__init__(reason)
        self.verdict, self.reason, self.details = verdict, reason, details


class LandQueue:
    def __init__(
        self, core: Core, apply: Apply, runner: JobRunner, refs: RefWatcher | None, state_dir: Path
    ) -> None:
        self._core = core
        self._apply = apply
        self._runner = runner
        self._refs = refs
        self._git = Git(refs.common, core.settings.land_git_timeout) if refs is not None else None
        self._scratch_root = state_dir / "land"
        # Written before the integration branch moves while a worktree has it checked
        # out, removed once that checkout followed: found at start, the coordinator died
        # between the two, and the checkout is brought along then (else it shows the
        # landing undone as local changes, and blocks every later landing).
        self._moving_file = self._scratch_root / "moving.json"
        self._queues: dict[str, list[Entry]] = {}  # target -> its FIFO (the first one runs)
        self._wake: dict[str, trio.Event] = {}
        self._entries: OrderedDict[str, Entry] = OrderedDict()  # job -> entry, queued and decided
        self._agent_of: OrderedDict[str, str] = OrderedDict()  # integration commit -> agent that landed it
        self._nursery: trio.Nursery | None = None
        # Held from a landing's compare-and-swap until the core has its verdict: the
        # server's merge-hold settling (the ref watcher saw main move) waits for it, so
        # a landing's merge holds are freed by the landing, in the same turn.
        self.moving = trio.Lock()
        self._holding = False

    # ------------------------------------------------------------------ entry points

    def enqueue(self, nursery: trio.Nursery, effect: StartJob) -> None:
        request: m.Land = effect.request
        index = self._core.integration
        entry = Entry(
            job=effect.job, agent=effect.agent, session=getattr(request, "session", None), branch=_ref(request.branch),
            head=request.head, target=index.branch if index else "refs/heads/main", cwd=request.cwd, venv=request.venv,
            bundle=getattr(request, "bundle", b""),
        )
        self._add(nursery, entry)

    def _add(self, nursery: trio.Nursery, entry: Entry) -> None:
        self._nursery = nursery
        entry.landing = m.Landing(
            job=entry.job, agent=entry.agent, branch=entry.short_branch, target=entry.short_target, head=entry.head,
        )
        entry.view = self._runner.register(entry.job, "land", entry.agent)
        self._entries[entry.job] = entry
        queue = self._queues.get(entry.target)
        if queue is None:
            queue = self._queues[entry.target] = []
            self._wake[entry.target] = trio.Event()
            nursery.start_soon(self._worker, entry.target, name=f"land queue {entry.short_target}")
        queue.append(entry)
        self._wake[entry.target].set()

    def answer(self, peer: Any, query: m.LandQuery) -> list[Effect]:
        entry = self._entries.get(query.job)
        if entry is None:
            return [Send(peer, m.Error(req=query.req, code="bad_request", message=f"no landing {query.job!r} (decided long ago, or never queued)"))]
        return [Send(peer, msgspec.structs.replace(self.describe(entry), req=query.req))]

    def describe(self, entry: Entry) -> m.Landing:
        landing = entry.landing
        if landing.stage != "finished":
            queue = self._queues.get(entry.target, [])
            position = queue.index(entry) if entry in queue else 0
            now = time.monotonic()
            waited = (entry.started_at or now) - entry.queued_at
            results = list(entry.view.results) if entry.view is not None else []
            landing = msgspec.structs.replace(landing, position=position, waited=round(waited, 3), took=round(now - entry.queued_at, 3), results=results)
        return landing

    def queued(self) -> list[m.Landing]:
        """Every landing not yet decided, in queue order (for ``status`` and ``top``)."""
        return [msgspec.structs.replace(self.describe(e), results=[]) for queue in self._queues.values() for e in queue]

    async def resume(self, nursery: trio.Nursery, ledger: Ledger) -> int:
        """Landings the ledger shows queued and not decided: queue them again, in order;
        and which agent landed which integration commits (to name them in conflicts)."""

        def read() -> tuple[list[dict], list[tuple[str, list[str]]]]:
            open_: dict[str, dict] = {}
            landed: list[tuple[str, list[str]]] = []
            for event in ledger.events(kinds=["land.queued", "land.landed", "land.refused"]):
                job = event.data.get("job")
                if event.kind == "land.queued":
                    open_[job] = {**event.data, "agent": event.agent, "session": event.session}
                else:
                    open_.pop(job, None)
                    if event.kind == "land.landed" and event.agent:
                        landed.append((event.agent, [event.data.get("commit", ""), *event.data.get("commits", [])]))
            return list(open_.values()), landed

        await self._finish_interrupted_move()
        pending, landed = await trio.to_thread.run_sync(read)
        for agent, commits in landed:
            self._remember(agent, commits)
        index = self._core.integration
        for data in pending:
            target = index.branch if index else "refs/heads/main"
            entry = Entry(
                job=data["job"], agent=data.get("agent"), session=data.get("session"), branch=_ref(data["branch"]),
                head=data["head"], target=target, cwd=data.get("cwd", ""),
            )
            self._add(nursery, entry)
        return len(pending)

    # ------------------------------------------------------------------ the queue

    async def _worker(self, target: str) -> None:
        queue = self._queues[target]
        while True:
            if not queue:
                self._wake[target] = trio.Event()
                await self._wake[target].wait()
                continue
            batch = queue[: max(1, self._core.settings.land_batch)]
            for entry in batch:
                entry.started_at = entry.started_at or time.monotonic()
            try:
                decided = await self._land_batch(batch)
            except Refusal as refusal:
                decided = {e.job: (self._refused(e, refusal), refusal.details.get("results", [])) for e in batch}
            except (GitFailed, ProbeError, PeerError, UsageError, OSError) as exc:
                refusal = Refusal("blocked", f"could not land: {getattr(exc, 'message', None) or exc}")
                decided = {e.job: (self._refused(e, refusal), []) for e in batch}
            except Exception as exc:  # a bug in one landing must not stop the queue
                log.exception("landing %s crashed", ", ".join(e.job for e in batch))
                refusal = Refusal("blocked", f"internal error landing it: {exc!r} (see coordinator.log)")
                decided = {e.job: (self._refused(e, refusal), []) for e in batch}
            try:
                for entry in batch:
                    if entry.job in decided:
                        record, results = decided[entry.job]
                        queue.remove(entry)
                        await self._finish(entry, record, results)
            finally:
                self._let_settle()
            self._forget_old()

    async def _finish(self, entry: Entry, record: rec.LandLanded | rec.LandRefused, results: list[dict]) -> None:
        landed = isinstance(record, rec.LandLanded)
        entry.landing = msgspec.structs.replace(
            self.describe(entry), stage="finished", verdict="landed" if landed else record.verdict, reason=self._reason(record),
            commit=record.commit if landed else "", base=record.base, changed=record.changed if landed else [],
            conflicts=[msgspec.convert(c, m.LandConflict) for c in getattr(record, "conflicts", [])],
            results=results, waited=record.waited, took=record.took,
        )
        if landed:
            self._remember(entry.agent or "", [record.commit, *record.commits])
        if entry.clone_ref:  # decided: landed, its commits are on the target; refused, the clone still has them
            try:
                await self._git.run("update-ref", "-d", entry.clone_ref, check=False)
            except GitFailed as exc:  # decided all the same: a leftover private ref is harmless
                log.warning("could not delete %s: %s", entry.clone_ref, exc)
        gate = m.Gate(subject="land", verdict="pass" if landed else "fail", reason=entry.landing.reason, job=entry.job, agent=entry.agent, results=results)
        entry.view.results = list(results)
        entry.view.gate = gate
        await self._apply(lambda now: self._core.land_finished(record, gate, now))

    def _refused(self, entry: Entry, refusal: Refusal) -> rec.LandRefused:
        now = time.monotonic()
        return rec.LandRefused(
            agent=entry.agent, session=entry.session, job=entry.job, branch=entry.branch, target=entry.short_target,
            verdict=refusal.verdict, reason=refusal.reason, head=entry.head, base=refusal.details.get("base", ""),
            conflicts=refusal.details.get("conflicts", []), failed=refusal.details.get("failed", []),
            waited=round((entry.started_at or now) - entry.queued_at, 3), took=round(now - entry.queued_at, 3),
        )

    @staticmethod
    def _reason(record: rec.LandLanded | rec.LandRefused) -> str:
        if isinstance(record, rec.LandRefused):
            return record.reason
        n = len(record.changed)
        return f"{record.branch.removeprefix('refs/heads/')} landed on {record.target} as {record.commit[:10]} ({n} file{'s' if n != 1 else ''} changed)"

    async def _note(self, record: rec.Record) -> None:
        await self._apply(lambda now: self._core.note(record, now))

    def _stage(self, entry: Entry, stage: str, **fields: Any) -> None:
        entry.landing = msgspec.structs.replace(entry.landing, stage=stage, **fields)

    @staticmethod
    def _common(entry: Entry) -> dict:
        return dict(agent=entry.agent, session=entry.session, job=entry.job, branch=entry.branch, target=entry.short_target)

    async def _land_batch(self, batch: list[Entry]) -> dict[str, tuple[rec.LandLanded | rec.LandRefused, list[dict]]]:
        """One round of the queue for its first ``len(batch)`` landings (``[land]
        batch``; 1: one at a time): the verdicts decided, by job.  Those not decided
        (a lost compare-and-swap, a batch mate that failed or conflicts) stay first in
        the queue for the next round; the first landing of a round is always decided
        unless the integration branch moved under it."""
        git = self._git
        if git is None:
            raise Refusal("blocked", "the coordinator does not serve a git repository")
        decided: dict[str, tuple[rec.LandLanded | rec.LandRefused, list[dict]]] = {}
        target = batch[0]
        base = await git.resolve(target.target)
        if base is None:
            raise Refusal("blocked", f"the integration branch {target.short_target} does not exist")
        # Pre-flight: merged in memory, one onto the other, in queue order.
        chain: list[tuple[Entry, str]] = []  # (landing, the merge commit that brings it)
        tip = base
        for entry in batch:
            if entry.lost >= MAX_ATTEMPTS:
                why = f"{entry.short_target} moved under the landing {MAX_ATTEMPTS} times in a row: land it again when it is quieter"
                decided[entry.job] = (self._refused(entry, Refusal("blocked", why)), [])
                continue
            entry.attempts += 1
            self._stage(entry, "preflight", attempts=entry.attempts)
            if self._runner.is_remote(entry.agent):
                try:
                    now_head = await self._from_clone(entry)
                except Refusal as refusal:
                    decided[entry.job] = (self._refused(entry, refusal), [])
                    continue
                if now_head != entry.head:
                    decided[entry.job] = (self._refused(entry, Refusal("blocked", self._not_here(entry, now_head))), [])
                    continue
            else:
                now_head = await git.resolve(entry.branch)
            if now_head != entry.head:
                moved = f"moved to {now_head[:10]}" if now_head else "was deleted"
                why = f"{entry.short_branch} {moved} after it was queued at {entry.head[:10]}: land it again"
                decided[entry.job] = (self._refused(entry, Refusal("stale", why)), [])
                continue
            await self._note(rec.LandPreflight(**self._common(entry), base=base, attempt=entry.attempts))
            self._stage(entry, "preflight", base=base)
            if await git.is_ancestor(entry.head, base):  # already there (e.g. landed before a restart)
                decided[entry.job] = (await self._already_there(entry, base), [])
                continue
            try:
                commit = await self._merged(entry, base, tip)
            except Refusal as refusal:
                if tip == base:
                    decided[entry.job] = (self._refused(entry, refusal), [])
                # else it merges onto the integration branch but not onto a batch mate:
                # it waits for the next round, when the mate has landed (or not)
                continue
            held = self._core.landing_held(entry.agent, await git.changed(tip, commit), trio.current_time())
            if held:
                listed = ", ".join(held[:5]) + (f" and {len(held) - 5} more" if len(held) > 5 else "")
                why = (f"{entry.short_branch} changes files others hold: {listed}; land it once they are released "
                       "(their landing frees them)")
                decided[entry.job] = (self._refused(entry, Refusal("blocked", why)), [])
                continue
            chain.append((entry, commit))
            tip = commit
        if not chain:
            return decided
        checkout = self._checkout_of(target.target)
        if (dirty := await self._dirty(checkout, target)) is not None:
            return decided | {e.job: (self._refused(e, dirty), []) for e, _ in chain}
        # Verify the whole chain; on a failure, bisect for the first landing that breaks it.
        good, good_results = 0, []
        bad, bad_results, bad_refusal = len(chain), *await self._verify(chain, base)
        if bad_refusal is None:
            good, good_results = bad, bad_results
        while bad - good > 1:
            middle = (good + bad) // 2
            results, refusal = await self._verify(chain[:middle], base)
            if refusal is None:
                good, good_results = middle, results
            else:
                bad, bad_results, bad_refusal = middle, results, refusal
        if bad_refusal is not None:
            culprit = chain[bad - 1][0]
            decided[culprit.job] = (self._refused(culprit, bad_refusal), bad_results)
        if good == 0:
            return decided
        landing = chain[:good]
        new = landing[-1][1]
        if (dirty := await self._dirty(checkout, target)) is not None:
            return decided | {e.job: (self._refused(e, dirty), []) for e, _ in landing}
        for entry, _ in landing:
            self._stage(entry, "landing")
        jobs = ", ".join(e.job for e, _ in landing)
        await self.moving.acquire()  # released once the verdicts are in (_worker)
        self._holding = True
        if checkout is not None:
            await trio.to_thread.run_sync(self._write_moving, {"ref": target.target, "checkout": str(checkout), "old": base, "new": new})
        try:
            moved = await git.compare_and_swap(target.target, new, base, f"lockstep land {', '.join(e.short_branch for e, _ in landing)} (job {jobs})")
        except GitFailed:  # refused or timed out with the branch where it was: no move to finish
            self._moving_file.unlink(missing_ok=True)
            raise
        why = await git.move_checkout(checkout, base, new) if moved and checkout is not None else None
        self._moving_file.unlink(missing_ok=True)  # not on the way out of a cancelled move: the next start finishes it
        if not moved:
            reason = f"{target.short_target} moved during the landing (no longer at {base[:10]}): merging again"
            for entry, _ in landing:
                entry.lost += 1
                await self._note(rec.LandRequeued(**self._common(entry), reason=reason, attempt=entry.attempts))
            return decided
        if why is not None:  # someone edited the checkout since the check: put the branch back
            await git.compare_and_swap(target.target, base, new, "lockstep land: undone, the checkout could not follow")
            refusal = Refusal(
                "blocked", f"{target.short_target} is checked out in {checkout}, which could not move with it ({why}); "
                f"{target.short_target} was left at {base[:10]}", base=base,
            )
            return decided | {e.job: (self._refused(e, refusal), []) for e, _ in landing}
        before = base
        for entry, commit in landing:  # each with what it brought: its files, its commits
            changed = await git.changed(before, commit)
            commits = await git.commits_between(before, commit)
            decided[entry.job] = (self._landed(entry, base, commit, before, changed, commits), good_results)
            before = commit
        if self._refs is not None:
            # Last before the core hears of it (it frees claims: released paths must not
            # look unmerged); the ref watcher, seeing main move, frees merge holds too
            # ("merged"), so nothing slow may come between this and the verdict.
            await self._refs.sync()
        return decided

    async def _from_clone(self, entry: Entry) -> str | None:
        """A remote agent's branch, where it is on this host: the bundle sent with the
        landing, checked (``git bundle verify``: its prerequisite commits are here) and
        fetched into a private ref (``refs/lockstep/clones/AGENT/BRANCH``: no branch of
        this repository is touched), else the branch pushed here.  Its commit, or None."""
        git = self._git
        private = f"{CLONE_REFS}{entry.agent}/{entry.short_branch}"
        if entry.bundle:
            self._scratch_root.mkdir(parents=True, exist_ok=True)
            path = self._scratch_root / f"clone-{entry.job.replace('/', '_')}.bundle"
            await trio.to_thread.run_sync(path.write_bytes, entry.bundle)
            entry.bundle = b""  # fetched once: the private ref keeps it (across a restart too)
            try:
                checked = await git.run("bundle", "verify", "-q", str(path), check=False)
                if checked.returncode != 0:
                    why = (checked.stderr.decode(errors="replace").strip().splitlines() or ["git bundle verify failed"])[-1]
                    raise Refusal("blocked", f"the bundle of {entry.short_branch} sent from {entry.agent}'s clone cannot be used here: {why}. "
                                  "Push your branch to the coordinator's repository and run `lockstep land` again")
                fetched = await git.run("fetch", "--quiet", "--no-tags", "--no-write-fetch-head", str(path), f"+{entry.branch}:{private}", check=False)
                if fetched.returncode != 0:
                    why = (fetched.stderr.decode(errors="replace").strip().splitlines() or ["git fetch failed"])[-1]
                    raise Refusal("blocked", f"could not fetch {entry.short_branch} from the bundle {entry.agent}'s clone sent: {why}")
            finally:
                path.unlink(missing_ok=True)
        found = await git.resolve(private)
        if found is not None:
            entry.clone_ref = private
        return found if found == entry.head else await git.resolve(entry.branch)

    def _not_here(self, entry: Entry, now_head: str | None) -> str:
        """Why a remote agent's branch cannot land: the queue merges in the coordinator's
        repository, and the clone sent no usable bundle of it (too big for one message)."""
        where = "was not sent with the landing and does not exist" if now_head is None else f"is at {now_head[:10]}, not {entry.head[:10]},"
        common = self._git.common
        repository = common.parent if common.name == ".git" else common
        return (
            f"{entry.short_branch} {where} in the coordinator's repository ({repository}): {entry.agent}'s clone is "
            "on another host and the merge queue lands what is here (a branch comes with the landing only when it fits in "
            "one message). Land from the coordinator's host, or push your "
            f"branch to it first (`git push REMOTE {entry.short_branch}`, REMOTE being the coordinator's repository) "
            "and run `lockstep land` again"
        )

    def _let_settle(self) -> None:
        if self._holding:
            self._holding = False
            self.moving.release()

    def _landed(self, entry: Entry, base: str, commit: str, parent: str, changed: list[str], commits: list[str]) -> rec.LandLanded:
        """``entry`` landed: ``target`` moved from ``base``; ``commit`` is the merge
        commit that brought it (onto ``parent``: ``base``, or a batch mate's)."""
        now = time.monotonic()
        return rec.LandLanded(
            **self._common(entry), commit=commit, base=base, head=entry.head, changed=changed, commits=commits[:LANDED_COMMITS_KEPT],
            waited=round((entry.started_at or now) - entry.queued_at, 3), took=round(now - entry.queued_at, 3),
        )

    async def _already_there(self, entry: Entry, base: str) -> rec.LandLanded:
        """The verdict of a landing whose head is on the integration branch already: the
        merge that brought it, with the files and commits it brought (so its claims on
        them are freed, as when it lands: a coordinator stopped after moving the branch
        decides the landing at restart).  With no merge to find (a fast-forward, the tip
        itself): the tip, nothing brought."""
        git = self._git
        out = await git.run("rev-list", "--first-parent", "--reverse", f"--max-count={LANDED_COMMITS_KEPT}", base, "--not", entry.head, check=False)
        line = out.stdout.decode().split()
        low, high = 0, len(line)  # the first of ``line`` (oldest first) holding the head: each after it does too
        while low < high:
            mid = (low + high) // 2
            if await git.is_ancestor(entry.head, line[mid]):
                high = mid
            else:
                low = mid + 1
        if low == len(line):
            return self._landed(entry, base, base, base, [], [])
        merge = line[low]
        parent = await git.resolve(f"{merge}^1")
        if parent is None:
            return self._landed(entry, base, base, base, [], [])
        return self._landed(entry, parent, merge, parent, await git.changed(parent, merge), await git.commits_between(parent, merge))

    def _checkout_of(self, target: str) -> Path | None:
        """The worktree that has the integration branch checked out, if any."""
        index = self._core.integration
        if index is None:
            return None
        for top, branch in index.worktree_branch.items():
            if branch == target:
                return Path(top)
        return None

    def _write_moving(self, move: dict) -> None:
        self._scratch_root.mkdir(parents=True, exist_ok=True)
        part = self._moving_file.with_name(self._moving_file.name + ".part")
        part.write_text(json.dumps(move))
        part.replace(self._moving_file)

    async def _finish_interrupted_move(self) -> None:
        """A move the coordinator died in the middle of (``_moving_file``): the branch
        moved and its checkout did not.  The checkout is brought along if it still is
        exactly at the old commit (nobody edited it since); else it is left as it is,
        and the log says why."""
        try:
            move = json.loads(self._moving_file.read_text())
            ref, checkout, old, new = (str(move[k]) for k in ("ref", "checkout", "old", "new"))
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError) as exc:
            log.warning("unreadable %s (%s): removed", self._moving_file, exc)
            self._moving_file.unlink(missing_ok=True)
            return
        git, top = self._git, Path(checkout)
        try:
            if git is not None and await git.resolve(ref) == new and (top / ".git").exists() and await git.checked_out(top) == new:
                if await git.left_at(top, old):
                    why = await git.move_checkout(top, old, new)
                    if why is None:
                        log.info("brought %s from %s to %s: the coordinator had stopped between moving %s and its checkout",
                                 top, old[:10], new[:10], ref)
                    else:
                        log.warning("could not bring %s from %s to %s (%s)", top, old[:10], new[:10], why)
                else:
                    log.warning("%s was left at %s when %s moved to %s, and was edited since: left as it is", top, old[:10], ref, new[:10])
        except GitFailed as exc:
            log.warning("could not finish moving %s to %s: %s", top, new[:10], exc)
        self._moving_file.unlink(missing_ok=True)

    async def _dirty(self, checkout: Path | None, entry: Entry) -> Refusal | None:
        if checkout is None:
            return None
        changed = await self._git.local_changes(checkout)
        if not changed:
            return None
        shown = ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")
        return Refusal(
            "blocked",
            f"{entry.short_target} is checked out in {checkout} with local changes ({shown}); it cannot move "
            f"without leaving files that disagree with it: commit or discard them there, then land again",
        )

    async def _merged(self, entry: Entry, base: str, onto: str) -> str:
        """The commit to verify and land: always a merge commit (first parent: the
        integration tip, or the batch mate merged before it), even where a fast-forward
        would do, so the integration branch's first-parent history is made of the
        queue's merges - the branch's own intermediate commits (a broken one, then its
        fix) never become integration commits.  A conflict with ``base`` refuses it."""
        git = self._git
        merged = await git.merge_tree(onto, entry.head)
        if not merged.clean:
            if onto != base:
                raise Refusal("conflict", "conflicts with a landing batched before it")
            conflicts = await self._conflicts(entry, base, merged)
            names = ", ".join(c["path"] for c in conflicts[:5]) + (f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
            who = sorted({c.get("agent") or c.get("author") or "?" for conflict in conflicts for c in conflict["commits"]} - {entry.agent})
            raise Refusal(
                "conflict",
                f"{entry.short_branch} conflicts with {entry.short_target} in {names}"
                + (f" (changed there by {', '.join(who)})" if who else "")
                + f": run `git merge {entry.short_target}` in your worktree, resolve, commit, and land again",
                base=base, conflicts=conflicts,
            )
        message = f"Land {entry.short_branch}" + (f" ({entry.agent})" if entry.agent else "") + f"\n\nlockstep land, job {entry.job}\n"
        return await git.commit_merge(merged.tree, onto, entry.head, message, entry.agent or "lockstep")

    async def _conflicts(self, entry: Entry, base: str, merged) -> list[dict]:
        git = self._git
        paths = list(merged.conflicts)
        fork = await git.merge_base(base, entry.head)
        touching = await git.commits_touching(fork, base, paths) if fork else {}
        conflicts = []
        for path in paths:
            commits = [
                {"commit": c, "author": author, "subject": subject, "agent": self._agent_of.get(c)}
                for c, author, subject in touching.get(path, [])
            ]
            conflicts.append({"path": path, "kind": merged.conflicts[path], "hunks": await git.hunks(merged.tree, path), "commits": commits})
        return conflicts

    async def _verify(self, prefix: list[tuple[Entry, str]], base: str) -> tuple[list[dict], Refusal | None]:
        """Run the checks on the last merge commit of ``prefix`` (every landing in it,
        merged onto ``base`` in order): the results, failing ones first, and the
        refusal of the last landing when they fail."""
        entry, candidate = prefix[-1]
        lead = prefix[0][0]  # whose job the results stream into while they run
        scratch = self._scratch_root / entry.short_target.replace("/", "_")
        await self._git.checkout_scratch(scratch, candidate)
        merged_onto = f"{entry.short_branch} merged onto {entry.short_target}" + (
            f" after {', '.join(e.short_branch for e, _ in prefix[:-1])} (batched with it)" if len(prefix) > 1 else ""
        )
        lead.view.results.clear()
        try:
            specs = await self._runner.land_specs(lead.view, scratch, lead.venv)
        except (ProbeError, ConfigError) as exc:  # no checks, a broken lockstep.toml: nothing verified, nothing lands
            return [], Refusal("failed", f"{exc.message} (in {merged_onto})", base=base)
        for member, _ in prefix:
            await self._note(rec.LandVerifying(**self._common(member), base=base, candidate=candidate, checks=[s.name for s in specs]))
            self._stage(member, "verifying")
        results: list[ProbeResult] = await self._runner.run_land_checks(lead.view, specs)
        data = [msgspec.to_builtins(r) for r in results]
        failed = [r for r in data if r.get("verdict") != "pass"]
        if not failed and (rewritten := await self._rewritten(scratch, candidate)):
            return data, Refusal(
                "failed",
                f"the checks changed files of {merged_onto} they were verifying ({rewritten}): what passed is not what "
                "would land; make them read-only (a formatter: `autofix = true`, or run it on your branch and commit), and land again",
                base=base, results=data,
            )
        if not failed:
            return data, None
        ordered = failed + [r for r in data if r.get("verdict") == "pass"]
        names = ", ".join(f"{r['name']} ({r.get('finding') or r.get('reason')})" for r in failed)
        return ordered, Refusal(
            "failed",
            f"{len(failed)} of {len(data)} checks failed on {merged_onto} ({base[:10]}): {names}; "
            "fix them on your branch (merge the integration branch first to reproduce) and land again",
            base=base, results=ordered, failed=[r["name"] for r in failed],
        )

    async def _rewritten(self, scratch: Path, candidate: str) -> str:
        """The tracked files the checks left different from ``candidate`` in the scratch
        worktree, named ("" if none: files git does not track, such as caches, are the
        checks' own)."""
        if not (scratch / ".git").is_file():
            return "the scratch worktree's .git"
        out = await self._git.run("diff", "--no-renames", "--name-only", "-z", candidate, "--", cwd=scratch, check=False)
        if out.returncode != 0:
            return f"git diff there failed: {out.stderr.decode(errors='replace').strip()[:200]}"
        changed = [p for p in out.stdout.decode("utf-8", "surrogateescape").split("\0") if p]
        return ", ".join(changed[:5]) + (f" and {len(changed) - 5} more" if len(changed) > 5 else "")

    # ------------------------------------------------------------------ memory

    def _remember(self, agent: str, commits: list[str]) -> None:
        if not agent:
            return
        for commit in commits:
            if commit:
                self._agent_of[commit] = agent
        while len(self._agent_of) > MEMORY_OF_AUTHORS:
            self._agent_of.popitem(last=False)

    def _forget_old(self) -> None:
        while len(self._entries) > KEEP_DECIDED:
            oldest = next(iter(self._entries.values()))
            if oldest.landing is None or oldest.landing.stage != "finished":
                break
            del self._entries[oldest.job]


def _ref(name: str) -> str:
    return name if name.startswith("refs/") else f"refs/heads/{name}"


