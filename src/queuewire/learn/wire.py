"""The systems under learning for dialogue tables: a quicx daemon or a bunqueue server over TCP.

What it is
----------
:class:`DialogueSUL` is AALpy's ``SUL`` (reset, step) over a live server for a dialogue table
(:mod:`.dialogue`): a query opens one connection per entry of the section's ``connections``,
each input sends its message on its connection (or, ``reconnect``, closes that connection and
opens another), and the output is what every connection received because of it, in the
alphabet of :func:`.dialogue.output`. The protocol's side is a :class:`Wire`:

* :class:`QuicxWire`: after each input the section's ``sync`` (MSG_HEARTBEAT) goes out on
  every connection, the input's first, and a connection has received everything the input
  caused when the sync's answer (MSG_PONG) arrives: a daemon answers a connection's frames in
  order and sends what one frame causes on other connections before it reads the next one,
  so no timing is involved. A MSG_ERROR shows as ``MSG_ERROR(<code name>)``. A query ends
  with its task finished: one it submitted and did not see finished (its worker took it and
  the ``finishes`` input got no refusal) is taken by a fresh worker connection, asking with
  the section's ``cleanup`` inputs, and completed, so nothing is left queued on the target.
* :class:`BunqueueWire`: a request and its reply (by reqId); the output is ``ok`` or the name
  of the profile's ``errors`` entry whose message the refusal carries (``error`` for another).

A connection the server closes shows as ``closed`` in the output of the input that closed it,
and later inputs on it are not sent (``-``); every wait has a deadline (``timeout``), so a
server that never answers ends the run with :class:`Unanswered`, never a hang.

Design
------
Blocking sockets, as :mod:`.sul`: AALpy drives the SUL synchronously (the command line runs
it in a worker thread when the target is an embedded server in its loop). Frames go through
the codecs. Nothing is kept after a query but AALpy's cache.
"""

from __future__ import annotations

import itertools
import socket
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aalpy.base import SUL

from ..codecs.bunqueue import FrameDecoder, FrameEncoder
from ..codecs.quicx import QuicxDecoder, QuicxEncoder, from_text
from ..spec import Profile
from .dialogue import Dialogue, sendable
from .machine import NOT_SENT, needs

__all__ = ["CLOSED", "READY_BACKOFF", "READY_TRIES", "BunqueueWire", "DialogueSUL", "QuicxWire",
           "Unanswered", "Wire", "fill"]

#: The output item of a connection the server closed.
CLOSED = "closed"

#: Seconds a cleanup worker waits for an answer to its MSG_READY before it sends another
#: (004: after MSG_WAIT "the worker ... issues another MSG_READY after a short backoff").
READY_BACKOFF = 0.2
READY_TRIES = 25


def fill(value: Any, env: Mapping[str, Any]) -> Any:
    """``value`` with every ``${name}`` replaced; a string that is exactly one ``${name}``
    takes the variable's value with its type (a task id stays an integer)."""
    if isinstance(value, str):
        if value.startswith("${") and value.endswith("}") and value[2:-1] in env:
            return env[value[2:-1]]
        for k, v in env.items():
            value = value.replace("${" + k + "}", str(v))
        return value
    if isinstance(value, Mapping):
        return {k: fill(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, env) for v in value]
    return value


class Unanswered(ConnectionError):
    """The target sent nothing that completes an exchange within the deadline."""


class Wire:
    """One protocol's side of a dialogue: connections, an input's exchange, the cleanup."""

    def __init__(self, profile: Profile, host: str, port: int, timeout: float):
        self.profile, self.host, self.port, self.timeout = profile, host, port, timeout
        self.sent = 0

    def open(self, role: str) -> Any:
        raise NotImplementedError

    def close(self, conn: Any) -> None:
        conn.sock.close()

    def exchange(self, conns: Mapping[str, Any], name: str, send: Mapping[str, Any],
                 sync: Mapping[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
        """Send ``send`` on connection ``name``; what each open connection received because of
        it, as (output item, fields) pairs (:data:`CLOSED` last when the server closed it)."""
        raise NotImplementedError

    def finish(self, d: Dialogue, vars_: Mapping[str, Any], finished: bool) -> None:
        """After a query's connections are closed: leave nothing on the target."""


class _Conn:
    """A connection with a deadline on every frame it waits for."""

    def __init__(self, sock: socket.socket, decoder: Any, timeout: float):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.decoder, self.timeout = sock, decoder, timeout
        self.frames: list[Any] = []
        self.closed = False

    def next(self, deadline: float) -> Any:
        """The next frame; ``ConnectionError`` when the server closed the connection,
        :class:`Unanswered` when ``deadline`` (monotonic) passes first."""
        while not self.frames:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Unanswered(f"nothing within {self.timeout:g} s")
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(65536)
            except TimeoutError:
                raise Unanswered(f"nothing within {self.timeout:g} s") from None
            if not data:
                self.closed = True
                raise ConnectionError("the target closed the connection")
            self.frames.extend(self.decoder.feed(data))
        return self.frames.pop(0)


class QuicxWire(Wire):
    """A quicx daemon (see the module docstring)."""

    def __init__(self, profile: Profile, host: str, port: int, timeout: float = 5.0):
        super().__init__(profile, host, port, timeout)
        self.encoder = QuicxEncoder(profile)
        spec = self.encoder.spec
        self._codes = {c.code: name for name, c in spec.error_codes.items()}

    def open(self, role: str) -> _Conn:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        return _Conn(sock, QuicxDecoder(self.profile, None), self.timeout)  # an observer

    def _frame(self, send: Mapping[str, Any]) -> bytes:
        """A ``send`` as the case language writes it (``{type, fields}``) as a frame."""
        name = send["type"]
        return self.encoder.encode(name, **from_text(self.encoder.spec, name,
                                                     send.get("fields") or {}))

    def _item(self, msg: Any) -> str:
        if msg.name == "MSG_ERROR":
            code = msg.fields.get("error_code")
            return f"MSG_ERROR({self._codes.get(code, code)})"
        return str(msg.name)

    def exchange(self, conns: Mapping[str, Any], name: str, send: Mapping[str, Any],
                 sync: Mapping[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
        got: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        answer, probe = sync["answer"], self._frame(sync["send"])
        try:
            conns[name].sock.sendall(self._frame(send))
        except OSError:
            conns[name].closed = True
            return {name: [(CLOSED, {})]}
        self.sent += 1
        for conn_name in [name] + [n for n in conns if n != name and not conns[n].closed]:
            conn = conns[conn_name]
            items: list[tuple[str, dict[str, Any]]] = []
            got[conn_name] = items
            # the input itself may be the sync's message: then the first answer is the input's
            owed = 2 if conn_name == name and send.get("type") == sync["send"]["type"] else 1
            answered = 0
            deadline = time.monotonic() + self.timeout
            try:
                conn.sock.sendall(probe)
                while answered < owed:
                    msg = conn.next(deadline)
                    if msg.name == answer:
                        answered += 1
                        if answered == owed:
                            break
                    items.append((self._item(msg), dict(msg.fields)))
            except Unanswered:
                if answered == 0:
                    raise Unanswered(f"{conn_name}: no {answer} answered the sync "
                                     f"{sync['send']['type']} within {self.timeout:g} s") from None
                # one answer came: the sync's; the input (a sync message itself) got another
            except OSError:
                conn.closed = True
                items.append((CLOSED, {}))
        return got

    def finish(self, d: Dialogue, vars_: Mapping[str, Any], finished: bool) -> None:
        """A task this query submitted and did not see finished is taken by a fresh worker,
        which asks and completes with the inputs the section's ``cleanup`` names, as 004 says
        a worker does: a READY answered with MSG_WAIT, or not answered within
        :data:`READY_BACKOFF` seconds, is sent again after that backoff, up to
        :data:`READY_TRIES` times. Only the query's own task is completed; another's is left
        to the daemon (it is requeued when the cleanup worker closes)."""
        cleanup = d.cleanup
        if not cleanup or finished:
            return
        complete_entry = d.inputs[cleanup["complete"]]
        task_var = next(iter(needs_saved(d, complete_entry)), None)
        task = vars_.get(task_var) if task_var else None
        if task_var is None or task is None:
            return
        ask = self._frame(fill(d.inputs[cleanup["ask"]]["send"], vars_))
        complete = self._frame(fill(complete_entry["send"], vars_))
        carries = d.carried[task_var]
        conn = self.open(d.connections[d.inputs[cleanup["ask"]]["conn"]])
        try:
            for _ in range(READY_TRIES):
                conn.sock.sendall(ask)
                try:
                    msg = conn.next(time.monotonic() + READY_BACKOFF)
                except Unanswered:
                    continue
                if msg.fields.get(carries) == task:
                    conn.sock.sendall(complete)
                    return
                time.sleep(READY_BACKOFF)       # WAIT (or another's task): ask again later
            raise Unanswered(f"task {task} of this run stays on the target: a worker's "
                             f"{READY_TRIES} requests did not get it")
        finally:
            self.close(conn)


class BunqueueWire(Wire):
    """A bunqueue server, request by request (see the module docstring)."""

    def __init__(self, profile: Profile, host: str, port: int, timeout: float = 5.0):
        super().__init__(profile, host, port, timeout)
        self.encoder = FrameEncoder(profile)
        self._errors = profile.model.errors
        self._ids = itertools.count(1)

    def open(self, role: str) -> _Conn:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        return _Conn(sock, FrameDecoder(self.profile, check_depth=False), self.timeout)

    def request(self, conn: _Conn, send: Mapping[str, Any]) -> dict[str, Any]:
        """Send one request on ``conn`` and give its reply (matched by reqId; other frames
        are skipped). :class:`Unanswered` past the deadline; ``OSError`` when the connection
        is gone."""
        rid = f"l{next(self._ids)}"
        deadline = time.monotonic() + self.timeout
        conn.sock.sendall(self.encoder.encode({**send, "reqId": rid}))
        self.sent += 1
        try:
            while True:
                reply = conn.next(deadline)
                if isinstance(reply, dict) and reply.get("reqId") == rid:
                    return reply
        except Unanswered:
            raise Unanswered(f"no reply to {send.get('cmd')} within {self.timeout:g} s") from None

    def exchange(self, conns: Mapping[str, Any], name: str, send: Mapping[str, Any],
                 sync: Mapping[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
        conn = conns[name]
        try:
            reply = self.request(conn, send)
        except Unanswered:   # an OSError too, but no close: the run ends on it
            raise
        except OSError:
            conn.closed = True
            return {name: [(CLOSED, {})]}
        if reply.get("ok") is True:
            item = "ok"
        else:   # the errors entry the refusal's string is (placeholders match anything)
            text = str(reply.get("error"))
            item = next((name for name, e in self._errors.items() if e.message == text), None) \
                or next((name for name, e in self._errors.items() if e.pattern.fullmatch(text)),
                        "error")
        return {name: [(item, reply)]}


class DialogueSUL(SUL):  # type: ignore[misc]
    """A server seen through a dialogue table's ``learn`` section (module docstring).
    ``variables`` are the query-independent ones (``token``, ``wrong_token``)."""

    def __init__(self, dialogue: Dialogue, wire: Wire, variables: Mapping[str, Any] | None = None):
        super().__init__()
        self.d, self.wire = dialogue, wire
        self.base = dict(variables or {})
        self._run = uuid.uuid4().hex[:8]
        self._query = itertools.count(1)
        self.vars: dict[str, Any] = {}
        self.conns: dict[str, Any] = {}
        self.finished = False
        self.seen: set[tuple[str, str]] = set()   # (connection, variable) a frame carried

    @property
    def sent(self) -> int:
        return self.wire.sent

    def _close_all(self) -> None:
        for conn in self.conns.values():
            self.wire.close(conn)
        self.conns = {}

    def close(self) -> None:
        """End the run: close the query's connections, and finish its task if it stopped
        half way (an error ended the run inside a query)."""
        if self.conns:
            self._close_all()
            try:
                self.wire.finish(self.d, self.vars, self.finished)
            except OSError:
                pass   # the run is ending on an error already; that one is reported

    def pre(self) -> None:
        self.vars = {**self.base, "queue": f"qw-learn-{self._run}-{next(self._query)}"}
        self.finished = False
        self.seen = set()
        self.conns = {name: self.wire.open(role) for name, role in self.d.connections.items()}

    def post(self) -> None:
        self._close_all()
        self.wire.finish(self.d, self.vars, self.finished)

    def step(self, letter: str | None) -> str:
        if letter is None:
            return NOT_SENT
        entry = self.d.inputs[letter]
        conn = entry["conn"]
        if not sendable(self.d, entry, set(self.vars)) or (
                self.conns[conn].closed and not entry.get("reconnect")):
            return NOT_SENT
        if entry.get("reconnect"):
            self.wire.close(self.conns[conn])
            self.conns[conn] = self.wire.open(self.d.connections[conn])
            return self.d.output({})
        got = self.wire.exchange(self.conns, conn, fill(entry["send"], self.vars), self.d.sync)
        mine = got.get(conn) or []
        for var, field_ in (entry.get("saves") or {}).items():
            value = next((f[field_] for _, f in mine if field_ in f), None)
            if value is not None:
                self.vars[var] = value
        for name, items in got.items():   # which connection has received a saved value
            for _, fields in items:
                self.seen |= {(name, var) for var, field_ in self.d.carried.items()
                              if var in self.vars and fields.get(field_) == self.vars[var]}
        # a finishes input taken without a word back ends the task its connection holds
        held = all((conn, var) in self.seen for var in needs_saved(self.d, entry))
        if entry.get("finishes") and not mine and held:
            self.finished = True
        return self.d.output({name: [item for item, _ in items] for name, items in got.items()})


def needs_saved(d: Dialogue, entry: Mapping[str, Any]) -> set[str]:
    """The variables an input uses that some input saves (a task id, not a token)."""
    return needs(entry) & d.saved_vars
