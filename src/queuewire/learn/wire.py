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
  with its task finished: one it submitted and did not see finished is taken by a fresh
  worker connection and completed, so nothing is left queued on the target.
* :class:`BunqueueWire`: a request and its reply (by reqId); the output is ``ok`` or the name
  of the profile's ``errors`` entry whose message the refusal carries (``error`` for another).

Design
------
Blocking sockets, as :mod:`.sul`: AALpy drives the SUL synchronously (the command line runs
it in a worker thread when the target is an embedded server in its loop). Frames go through
the codecs. Nothing is kept after a query but AALpy's cache.
"""

from __future__ import annotations

import itertools
import socket
import uuid
from collections.abc import Mapping
from typing import Any

from aalpy.base import SUL

from ..codecs.bunqueue import FrameDecoder, FrameEncoder
from ..codecs.quicx import QuicxDecoder, QuicxEncoder
from ..spec import Profile
from .dialogue import Dialogue, sendable
from .machine import NOT_SENT

__all__ = ["READY_BACKOFF", "READY_TRIES", "BunqueueWire", "DialogueSUL", "QuicxWire", "Wire",
           "fill"]

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
        """Send ``send`` on connection ``name``; what each connection received because of it,
        as (output item, fields) pairs."""
        raise NotImplementedError

    def finish(self, vars_: Mapping[str, Any], finished: bool) -> None:
        """After a query's connections are closed: leave nothing on the target."""


class _Conn:
    def __init__(self, sock: socket.socket, decoder: Any):
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock, self.decoder = sock, decoder
        self.frames: list[Any] = []

    def next(self) -> Any:
        while not self.frames:
            data = self.sock.recv(65536)
            if not data:
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
        return _Conn(sock, QuicxDecoder(self.profile, None))  # an observer: no direction check

    def _frame(self, send: Mapping[str, Any]) -> bytes:
        name = send["type"]
        layout = {f.id: f for f in self.encoder.spec.messages[name].layout}
        fields = {}
        for key, value in (send.get("fields") or {}).items():
            f = layout.get(key)
            bytes_field = f is not None and not f.is_int and f.type != "str"
            fields[key] = value.encode() if isinstance(value, str) and bytes_field else value
        return self.encoder.encode(name, **fields)

    def _item(self, msg: Any) -> str:
        if msg.name == "MSG_ERROR":
            code = msg.fields.get("error_code")
            return f"MSG_ERROR({self._codes.get(code, code)})"
        return str(msg.name)

    def exchange(self, conns: Mapping[str, Any], name: str, send: Mapping[str, Any],
                 sync: Mapping[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
        conns[name].sock.sendall(self._frame(send))
        self.sent += 1
        answer, probe = sync["answer"], self._frame(sync["send"])
        got: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for conn_name in [name] + [n for n in conns if n != name]:
            conn = conns[conn_name]
            conn.sock.sendall(probe)
            # the input itself may be the sync's message: then its answer is the input's
            owed = 2 if conn_name == name and send.get("type") == sync["send"]["type"] else 1
            items: list[tuple[str, dict[str, Any]]] = []
            while True:
                msg = conn.next()
                if msg.name == answer:
                    owed -= 1
                    if owed == 0:
                        break
                items.append((self._item(msg), dict(msg.fields)))
            got[conn_name] = items
        return got

    def finish(self, vars_: Mapping[str, Any], finished: bool) -> None:
        """A task this query submitted and did not see finished is taken by a fresh worker
        and completed (a worker that closed with it requeued it). The worker behaves as 004
        says one does: a READY answered with WAIT, or not answered within
        :data:`READY_BACKOFF` seconds, is sent again, up to :data:`READY_TRIES` times."""
        task = vars_.get("task")
        if task is None or finished:
            return
        conn = self.open("worker")
        conn.sock.settimeout(READY_BACKOFF)
        try:
            for _ in range(READY_TRIES):
                conn.sock.sendall(self.encoder.encode("MSG_READY"))
                try:
                    msg = conn.next()
                except TimeoutError:
                    continue
                if msg.name == "MSG_TASK":
                    conn.sock.sendall(self.encoder.encode("MSG_DONE", task_id=msg.fields["task_id"]))
                    if msg.fields["task_id"] == task:
                        return
            raise ConnectionError(f"task {task} of this run stays on the target: a worker's "
                                  f"{READY_TRIES} READYs did not get it")
        finally:
            self.close(conn)


class BunqueueWire(Wire):
    """A bunqueue server, request by request (see the module docstring)."""

    def __init__(self, profile: Profile, host: str, port: int, timeout: float = 5.0):
        super().__init__(profile, host, port, timeout)
        self.encoder = FrameEncoder(profile)
        self._errors = {e.message: name for name, e in profile.model.errors.items()}
        self._ids = itertools.count(1)

    def open(self, role: str) -> _Conn:
        sock = socket.create_connection((self.host, self.port), timeout=self.timeout)
        return _Conn(sock, FrameDecoder(self.profile, check_depth=False))

    def exchange(self, conns: Mapping[str, Any], name: str, send: Mapping[str, Any],
                 sync: Mapping[str, Any]) -> dict[str, list[tuple[str, dict[str, Any]]]]:
        rid = f"l{next(self._ids)}"
        conn = conns[name]
        conn.sock.sendall(self.encoder.encode({**send, "reqId": rid}))
        self.sent += 1
        while True:
            reply = conn.next()
            if isinstance(reply, dict) and reply.get("reqId") == rid:
                break
        if reply.get("ok") is True:
            item = "ok"
        else:
            item = self._errors.get(str(reply.get("error")), "error")
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

    @property
    def sent(self) -> int:
        return self.wire.sent

    def close(self) -> None:
        for conn in self.conns.values():
            self.wire.close(conn)
        self.conns = {}

    def pre(self) -> None:
        self.vars = {**self.base, "queue": f"qw-learn-{self._run}-{next(self._query)}"}
        self.finished = False
        self.conns = {name: self.wire.open(role) for name, role in self.d.connections.items()}

    def post(self) -> None:
        self.close()
        self.wire.finish(self.vars, self.finished)

    def step(self, letter: str | None) -> str:
        if letter is None:
            return NOT_SENT
        entry = self.d.inputs[letter]
        if not sendable(self.d, entry, set(self.vars)):
            return NOT_SENT
        conn = entry["conn"]
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
        if entry.get("finishes") and not mine:   # taken without a word back: the task ended
            self.finished = True
        return self.d.output({name: [item for item, _ in items] for name, items in got.items()})
