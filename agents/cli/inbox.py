"""`lockstep tasks`, `send` and `inbox`: work and words for agents (coordinator/inbox.py)."""

from __future__ import annotations

import click

from agents.oneshot import expect, open_oneshot
from protocol import messages as m

from .base import agent_option, ask, endpoint_option, handle_errors, json_option, main
from .output import INT64_MAX, Failure, need_agent, out

ACTIONS = ("list", "take", "done", "add")


def _task_line(task: m.TaskInfo) -> str:
    whom = task.agent or "anyone"
    state = f"{task.state} by {task.by}" if task.by else task.state
    why = f"  (because: {task.because})" if task.because else ""
    return f"{task.id:>4}  {state:<18} for {whom:<14} {task.task}{why}"


@main.command("tasks")
@click.argument("action", required=False, default="list", type=click.Choice(ACTIONS))
@click.argument("args", nargs=-1)
@click.option("--to", "to", metavar="NAME", help="With `add`: the agent the task is for (default: anyone).")
@click.option("--all", "show_all", is_flag=True, help="List finished tasks too.")
@agent_option
@endpoint_option
@json_option
@handle_errors
def tasks(action, args, to, show_all, agent, endpoint, as_json):
    """Tasks for agents: a rule's `queue_task` response queues one (or `tasks add`).
    Without an action, list the open ones (with --agent: that agent's and anyone's);
    `take ID` makes one yours, `done ID` finishes it (exit 1 if another agent took it).
    An agent's hooks show it the tasks queued for it at its next turn.

    \b
    Examples:
      lockstep tasks --agent bob --json
      lockstep tasks take 3 --agent bob     # then: lockstep tasks done 3 --agent bob
      lockstep tasks add "restart the api after the deploy" --to bob
    """
    if action == "list":
        if args:
            raise Failure("usage", f"`tasks` lists; to act on task {args[0]} say `tasks take {args[0]}` or `tasks done {args[0]}`", 2)
        reply = expect(ask(endpoint, m.Tasks(op="list", agent=agent or None, all=show_all)), m.TasksReply)
        text = "\n".join(_task_line(t) for t in reply.tasks) or "no open tasks"
        out(as_json, {"tasks": reply.tasks, "message": reply.message}, text)
        return
    if action == "add":
        text = " ".join(args).strip()
        if not text:
            raise Failure("usage", "say what the task is: `lockstep tasks add TEXT [--to AGENT]`", 2)
        build = lambda s: m.Tasks(op="add", agent=to, text=text, session=s)  # noqa: E731
    else:
        if len(args) != 1 or not args[0].isdigit() or int(args[0]) > INT64_MAX:
            raise Failure("usage", f"`lockstep tasks {action} ID`: one task id, a number (`lockstep tasks` lists them)", 2)
        number, note = int(args[0]), ""
        build = lambda s: m.Tasks(op=action, id=number, text=note, session=s)  # noqa: E731
    if action == "add" and not agent:
        reply = ask(endpoint, build(None))  # queued by the operator
    else:
        with open_oneshot(need_agent(agent), endpoint=endpoint) as session:
            reply = session.call(build)
    reply = expect(reply, m.TasksReply)
    out(as_json, {"tasks": reply.tasks, "message": reply.message}, reply.message)


@main.command("send")
@click.option("--to", "to", required=True, metavar="NAME", help="The agent the message is for.")
@click.argument("text", nargs=-1, required=True)
@agent_option
@endpoint_option
@json_option
@handle_errors
def send(to, text, agent, endpoint, as_json):
    """Send a short message to agent NAME: its hooks put it in the model's context at
    its next turn (or before its next write), and `lockstep inbox` shows it. Sent as
    --agent (LOCKSTEP_AGENT) when set, else as the operator. Every message is a ledger
    event (`message.sent`, then `inbox.delivered`).

    \b
    Examples:
      lockstep send --to bob "src/api is mine until the release; take the docs instead"
      lockstep send --to alice --agent bob "done with the parser" --json
    """
    body = " ".join(text)
    build = lambda s: m.SendText(to=to, text=body, session=s)  # noqa: E731
    if agent:
        with open_oneshot(agent, endpoint=endpoint) as session:
            reply = session.call(build)
    else:
        reply = ask(endpoint, build(None))
    reply = expect(reply, m.Ok)
    out(as_json, {"to": to, "message": reply.message}, reply.message)


@main.command("inbox")
@click.option("--all", "show_all", is_flag=True, help="Also messages shown before, and every open task of the agent.")
@agent_option
@endpoint_option
@json_option
@handle_errors
def inbox(show_all, agent, endpoint, as_json):
    """The agent's messages and tasks not shown to it yet (then they count as shown:
    the hooks will not repeat them). With --all, recent messages already shown and
    every open task of the agent too.

    \b
    Examples:
      lockstep inbox --agent bob
      lockstep inbox --agent bob --all --json
    """
    from agents.inbox import render

    with open_oneshot(need_agent(agent), endpoint=endpoint) as session:
        reply = expect(session.call(lambda s: m.InboxQuery(session=s, via="inbox", all=show_all)), m.InboxReply)
    payload = {"agent": reply.agent, "messages": reply.messages, "tasks": reply.tasks}
    out(as_json, payload, render(reply) or f"nothing new for {reply.agent}")
