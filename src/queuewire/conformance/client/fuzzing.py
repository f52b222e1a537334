"""The client conformance server's fuzz mode: play one request whose replies a callable may
replace, and say what the testee made of it.

Design. Client fuzzing needs two packages that do not import each other: the fuzz package
generates the cases, the reply mutations and the oracle (``queuewire.fuzz.replies``, sans-IO),
and this package owns the conformance server and the testee contract. This module is the
conformance half, protocol-agnostic about the mutations: :func:`play` opens a session on the
bunqueue :class:`~.server.ConformanceServer` or the quicx
:class:`~.quicx_server.QuicxConformanceServer` whose ``mangle`` behaviour is the caller's
callable (it sees every reply the reference engine computed, bunqueue ``(cmd, n, request,
reply)``, quicx ``(message, n, frame, fields)``, and may return writes to send instead, then
a close), asks the testee to play the actions within ``limit`` seconds and
returns a :class:`Played`: the answer or why there was none (a crash: the process exited; a
hang: no answer within the limit; the testee is restarted for the next request), the real
replies by ``(cmd, n)`` (quicx: ``(message, n)``) and the wire transcript (bounded as a
scenario's is, :mod:`.records`). ``queuewire fuzz
--client`` (the CLI, which may import both packages) joins the halves and owns the campaign
loop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ...codecs.validation import jsonable
from .quicx_server import QuicxConformanceServer
from .records import BoundedTranscript
from .server import ConformanceServer
from .testee import Testee, TesteeError

__all__ = ["Played", "play"]

SETTLE = 0.05   # seconds for the testee's last frames after its answer

Mangle = Callable[[str, int, Any, Any], "dict[str, Any] | None"]


@dataclass
class Played:
    results: list[Any] | None          # the testee's results (None: no answer)
    failure: str | None = None         # why there was no answer
    hung: bool = False                 # no answer within the limit (else: it exited)
    answer: Any = None
    computed: dict[tuple[str, int], dict] = field(default_factory=dict)
    wire: list[dict[str, Any]] = field(default_factory=list)


async def play(server: ConformanceServer | QuicxConformanceServer, testee: Testee,
               request: dict[str, Any], mangle: Mangle, limit: float,
               behaviour: dict[str, Any] | None = None) -> Played:
    """One request to the testee, served with ``mangle`` in force (see the module docs);
    ``behaviour``: further server behaviours of the session (the scenario language's)."""
    transcript = BoundedTranscript()
    checker = server.new_checker({}, request.get("options") or {})
    session = server.begin({**(behaviour or {}), "mangle": mangle}, checker, transcript)
    try:
        answer = await testee.run(request, limit)
        raw = answer.get("results")
        played = Played(raw if isinstance(raw, list) else [], answer=answer)
        await asyncio.sleep(SETTLE)
    except TesteeError as exc:
        if exc.kind == "start":   # no client to judge: the caller says so and stops
            server.end()
            raise
        played = Played(None, failure=str(exc), hung=exc.kind == "timeout")
    server.end()
    played.computed = dict(session.computed)
    played.wire = [{"t": round(e.t, 4), "conn": e.conn, "dir": e.direction,
                    "hex": e.data.hex(), "note": e.note,
                    **({"decoded": jsonable(e.decoded)} if e.decoded is not None else {})}
                   for e in transcript.events]
    return played
