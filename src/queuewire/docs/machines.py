"""State machines drawn from the tables the code steps through: the server's job and
connection lifecycles from the spec (``StateMachine``), the reference client's bunqueue
session (``SESSION_TRANSITIONS``), and the quicx client's producer/monitor session, worker
and per-request machines (``CLIENT_TRANSITIONS``, ``WORKER_TRANSITIONS``,
``REQUEST_TRANSITIONS``). Each diagram comes with its table, so every transition is also
text a reader can search."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .text import esc, fence, req_ref, table


def _replies(t: Any) -> str:
    """What each connection receives after a dialogue table's row (nothing: "-")."""
    return "; ".join(f"{conn}: {', '.join(f'`{m}`' for m in items)}"
                     for conn, items in (t.replies or {}).items() if items) or "-"


def spec_machine(profile: Any, machine: Any, title: str, about: str = "") -> list[str]:
    """A spec state machine: diagram, then the (from, event, to, requirement) table, with
    what each connection receives when the table says (a dialogue table)."""
    if not machine.transitions:
        return []
    lines = [f"### {title}", "", esc(machine.doc), ""] + ([about, ""] if about else [])
    lines += fence("mermaid", machine.mermaid())
    if any(t.replies is not None for t in machine.transitions):
        rows = [[f"`{t.source}`", esc(t.event), _replies(t), f"`{t.target}`",
                 req_ref(profile, t.requirement)] for t in machine.transitions]
        return lines + table(["from", "event", "received", "to", "requirement"], rows)
    rows = [[f"`{t.source}`", esc(t.event), f"`{t.target}`", req_ref(profile, t.requirement)]
            for t in machine.transitions]
    return lines + table(["from", "event", "to", "requirement"], rows)


LEARN_NOTE = ("`queuewire learn` drives this table over the wire with the inputs of its "
              "`learn` section in `spec/` and compares the machine a server implements with "
              "it (an input with no row from a state is answered as the section's "
              "`otherwise` says and leaves the state, unless the section says it removes "
              "the job from there).")


def code_machine(table_: Mapping, initial: Any, final: Any, title: str, about: str,
                 source: str) -> list[str]:
    """A transition table of the client code (``(state, event) -> state``)."""
    from ..client.session import mermaid

    lines = [f"### {title}", "", f"{about} Drawn from `{source}`, the table the code steps "
             "through (a pair missing from it is an error).", ""]
    lines += fence("mermaid", mermaid(table_, initial, final))
    rows = [[f"`{s.name}`", f"`{e.value}`", f"`{t.name}`"] for (s, e), t in table_.items()]
    return lines + table(["from", "event", "to"], rows)


def bunqueue_machines(profile: Any) -> list[str]:
    from ..client.bunqueue_session import SESSION_TRANSITIONS, SPEC_STATES, SessionState

    model = profile.model
    lines = ["## State machines", ""]
    lines += spec_machine(profile, model.job_lifecycle, "Server: job lifecycle", LEARN_NOTE)
    lines += spec_machine(profile, model.connection_lifecycle, "Server: connection lifecycle")
    lines += spec_machine(profile, model.auth_session, "Server: auth session", LEARN_NOTE)
    lines += code_machine(SESSION_TRANSITIONS, SessionState.CREATED, SessionState.STOPPED,
                          "Reference client: session",
                          "The states of `queuewire.client`'s bunqueue session.",
                          "queuewire.client.bunqueue_session.SESSION_TRANSITIONS")
    lines += ["Each session state and the connection-lifecycle state it stands for:", ""]
    lines += table(["session state", "connection lifecycle state"],
                   [[f"`{s.name}`", f"`{spec}`"] for s, spec in SPEC_STATES.items()])
    return lines


def quicx_machines(profile: Any) -> list[str]:
    from ..client.quicx_session import WORKER_TRANSITIONS, WorkerState
    from ..client.session import CLIENT_TRANSITIONS, REQUEST_TRANSITIONS, ClientState

    lines = ["## State machines", "",
             "quicx has no negotiation: a connection is open as soon as TCP is. The client "
             "machines below are those of `queuewire.client`'s quicx sessions; which "
             "transitions a profile takes is set by its semantics flags (for example "
             "`ready_required_after_result`).", ""]
    lines += spec_machine(profile, profile.model.task_dialogue,
                          "Daemon: one task between a producer and a worker", LEARN_NOTE)
    lines += code_machine(WORKER_TRANSITIONS, WorkerState.CREATED, WorkerState.CLOSED,
                          "Worker session", "A worker's registration, task and backoff cycle.",
                          "queuewire.client.quicx_session.WORKER_TRANSITIONS")
    lines += code_machine(CLIENT_TRANSITIONS, ClientState.CREATED, ClientState.CLOSED,
                          "Producer and monitor session",
                          "The connection of a producer or a monitor.",
                          "queuewire.client.session.CLIENT_TRANSITIONS")
    first = next(iter(REQUEST_TRANSITIONS))[0]
    lines += code_machine(REQUEST_TRANSITIONS, first, None, "One request",
                          "Each submission or stats request, from the moment it is made to "
                          "its answer.", "queuewire.client.session.REQUEST_TRANSITIONS")
    return lines
