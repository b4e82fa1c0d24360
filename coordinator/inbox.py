"""The core's part in tasks and messages for agents: what reaches an agent, and when.

Theory
------
A *task* is work for an agent (or for anyone): a rule's ``queue_task`` response queues
one, so can a person (``lockstep tasks add``).  It goes ``queued`` -> ``taken`` (by the
agent that takes it) -> ``done``; only its taker finishes a taken task.  A *message* is a
short text to one agent (``lockstep send``).

Both reach the agent without it asking: at its next turn (a user prompt's hook) or its
next write (a pre-tool hook: the intent's ``decision`` says how many are waiting, and
the hook then asks for them) the hook puts them in the model's context.  What was shown
is recorded (``inbox.delivered``) and never shown again by a hook; ``inbox`` can list
them again (``all``).

State is the registry's (``Registry._inbox``), moved only by the records below, so a
restart (or a replay from a snapshot) gives exactly the same tasks and inboxes:
``task.queued``, ``task.taken``, ``task.done``, ``message.sent``, ``inbox.delivered``.
Handlers validate before they record (core Rule: a refused request changes nothing).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ledger import records as rec
from protocol import messages as m
from protocol.errors import PeerError
from protocol.paths import CONTROL_CHARACTER

from .effects import Outbox, Send
from .registry import Agent, MessageEntry, Registry, TaskEntry

TASKS_LISTED = 200  # tasks in one ``tasks`` reply (newest kept)
# Bounds on what waits, so that a flood of ``send`` or ``tasks add`` cannot grow the
# registry (and every snapshot and ``inbox`` reply) without end: past them the sender
# is told to wait, and nothing is recorded.
UNREAD_PER_AGENT = 100  # messages not yet shown to one agent
UNREAD_IN_ALL = 5_000  # messages not yet shown, to anyone (names no agent has joined as too)
OPEN_TASKS = 1_000  # tasks not done, queued by requests


def task_info(task: TaskEntry) -> m.TaskInfo:
    return m.TaskInfo(
        id=task.id, task=task.task, agent=task.agent, state=task.state, by=task.by, because=task.because, queued_by=task.queued_by
    )


def message_info(message: MessageEntry) -> m.MessageInfo:
    return m.MessageInfo(id=message.id, text=message.text, sender=message.sender, delivered=message.delivered)


def _checked_text(text: str, what: str) -> str:
    text = text.strip()
    if not text:
        raise PeerError("bad_request", f"an empty {what}: say what it is")
    if len(text.encode()) > m.MAX_TEXT_BYTES:
        raise PeerError("bad_request", f"the {what} is {len(text.encode())} bytes; at most {m.MAX_TEXT_BYTES}: point at a file instead")
    control = CONTROL_CHARACTER.search(text.replace("\n", "").replace("\t", ""))
    if control is not None:  # shown raw in terminals (inbox, top): lines and tabs only
        raise PeerError("bad_request", f"the {what} contains the control character U+{ord(control.group()):04X}: send plain text")
    return text


class Inbox:
    def __init__(
        self,
        out: Outbox,
        *,
        registry: Callable[[], Registry],
        record: Callable[[rec.Record], rec.Record],
        publish: Callable[[str, str | None, dict[str, Any]], None],
        session: Callable[[str, float], Agent],
        check_name: Callable[[str], None],
    ) -> None:
        self._out = out
        self._registry = registry
        self._record = record
        self._publish = publish
        self._session = session
        self._check_name = check_name

    @property
    def registry(self) -> Registry:
        return self._registry()

    def _reply(self, peer: Any, message: m.Reply) -> None:
        self._out.append(Send(peer, message))

    def _note(self, record: rec.Record) -> None:
        self._record(record)
        self._publish(record.KIND, record.agent, rec.data_of(record))

    # ------------------------------------------------------------------ tasks

    def queue_task(self, agent: str | None, task: str, because: str = "", by: str = "") -> int:
        """Queue a task (a rule's response, or ``tasks add``); its id."""
        number = self.registry.task_counter + 1
        self._note(rec.TaskQueued(agent=agent, task=task, because=because, id=number, by=by))
        return number

    def on_tasks(self, peer, msg: m.Tasks, now: float) -> None:
        reg = self.registry
        if msg.op == "list":
            if msg.agent is not None:
                self._check_name(msg.agent)
            tasks = [
                t for t in reg.tasks.values()
                if (msg.all or t.state != "done") and (msg.agent is None or t.agent in (None, msg.agent) or t.by == msg.agent)
            ]
            self._reply(peer, m.TasksReply(req=msg.req, tasks=[task_info(t) for t in tasks[-TASKS_LISTED:]]))
            return
        if msg.op == "add":
            text = _checked_text(msg.text, "task")
            if msg.agent is not None:
                self._check_name(msg.agent)
            if sum(t.state != "done" for t in reg.tasks.values()) >= OPEN_TASKS:
                raise PeerError("refused", f"{OPEN_TASKS} tasks are open already: finish some (`lockstep tasks done ID`) before queuing more")
            sender = self._session(msg.session, now).name if msg.session else ""
            number = self.queue_task(msg.agent, text, by=sender or "operator")
            task = reg.tasks[number]
            self._reply(peer, m.TasksReply(req=msg.req, tasks=[task_info(task)], message=f"queued task {number} for {msg.agent or 'anyone'}"))
            return
        if not msg.session:
            raise PeerError("bad_request", f"`tasks {msg.op}` acts as an agent: name one (--agent or LOCKSTEP_AGENT)")
        agent = self._session(msg.session, now)
        task = reg.tasks.get(msg.id)
        if task is None:
            raise PeerError("not_found", f"no task {msg.id}: `lockstep tasks` lists them")
        if msg.op == "take":
            if task.state == "taken" and task.by == agent.name:
                self._reply(peer, m.TasksReply(req=msg.req, tasks=[task_info(task)], message=f"task {task.id} is already yours"))
                return
            if task.state != "queued":
                whose = f"taken by {task.by}" if task.state == "taken" else "done"
                raise PeerError("refused", f"task {task.id} is {whose}")
            self._note(rec.TaskTaken(agent=agent.name, session=agent.session, id=task.id))
            self._reply(peer, m.TasksReply(req=msg.req, tasks=[task_info(task)], message=f"{agent.name} took task {task.id}: {task.task}"))
            return
        # done
        if task.state == "done":
            raise PeerError("refused", f"task {task.id} is already done")
        if task.state == "taken" and task.by != agent.name:
            raise PeerError("refused", f"task {task.id} is {task.by}'s (taken); only they can finish it")
        note = msg.text.strip()[:500]
        self._note(rec.TaskDone(agent=agent.name, session=agent.session, id=task.id, note=note))
        self._reply(peer, m.TasksReply(req=msg.req, tasks=[task_info(task)], message=f"{agent.name} finished task {task.id}"))

    # ------------------------------------------------------------------ messages

    def on_send(self, peer, msg: m.SendText, now: float) -> None:
        self._check_name(msg.to)
        text = _checked_text(msg.text, "message")
        unread = self.registry.unread
        if len(unread.get(msg.to, ())) >= UNREAD_PER_AGENT:
            raise PeerError("refused", f"{msg.to} has {UNREAD_PER_AGENT} messages it has not been shown yet: wait until it reads them")
        if sum(map(len, unread.values())) >= UNREAD_IN_ALL:
            raise PeerError("refused", f"{UNREAD_IN_ALL} messages wait to be shown to agents: wait until they read them")
        sender = self._session(msg.session, now).name if msg.session else ""
        number = self.registry.message_counter + 1
        self._note(rec.MessageSent(agent=msg.to, id=number, text=text, sender=sender))
        known = msg.to in self.registry.agents
        where = "at its next turn or write" if known else f"once it joins ({msg.to} is not known yet)"
        self._reply(peer, m.Ok(req=msg.req, message=f"message {number} to {msg.to}: shown to it {where}"))

    def on_inbox(self, peer, msg: m.InboxQuery, now: float) -> None:
        agent = self._session(msg.session, now)
        reg = self.registry
        messages, tasks = reg.undelivered(agent.name)
        fresh_messages, fresh_tasks = [x.id for x in messages], [t.id for t in tasks]
        if msg.all:  # recent messages already shown, and every open task of the agent
            messages = [x for x in reg.messages.values() if x.to == agent.name]
            tasks = [t for t in reg.tasks.values() if t.state != "done" and (t.agent == agent.name or t.by == agent.name)]
        reply = m.InboxReply(
            req=msg.req, agent=agent.name, messages=[message_info(x) for x in messages], tasks=[task_info(t) for t in tasks]
        )
        if fresh_messages or fresh_tasks:
            via = msg.via[:40] or "inbox"
            self._note(rec.InboxDelivered(agent=agent.name, session=agent.session, messages=fresh_messages, tasks=fresh_tasks, via=via))
        self._reply(peer, reply)

    def waiting(self, name: str) -> int:
        """How many messages and tasks wait to be shown to ``name``."""
        return self.registry.waiting(name)
