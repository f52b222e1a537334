"""Conformance of clients: a server that judges the client connected to it.

Design: the mirror image of the server runner, on the same vocabulary and reports. The client
under test (the *testee*) is a process driven over the testee contract (JSON lines on its
stdin and stdout, docs/conformance/client-testee.md; :mod:`.testee`); adapters for known
clients live in :mod:`.adapters`. Scenarios are data (``cases/client/<protocol>.yaml``, read
by :mod:`.scenarios`): what the conformance server does besides serving, what the testee is
asked to do, and what is judged, each judgement citing a requirement id whose level in the
spec bounds the verdict (a FAIL rests on a stated MUST). :mod:`.checker` is sans-IO: it
decodes every byte a client sends with the codecs and checks every frame against the spec
(framing, envelope, schema and batching limits, reqId uniqueness in flight, Auth first, lock
tokens); :mod:`.server` is the asyncio shell that listens on 127.0.0.1, answers through the
in-process reference engine (the embedded bunqueue server) and plays the adversarial
behaviours (replies reordered, split into 1-byte segments, coalesced, late, cut halfway, never
sent; refusals; short locks; a restart); :mod:`.judges` reads what the server saw. quicx has
its checker and server in :mod:`.quicx_server` (the reference engine, sans-IO, behind the
same session interface: WAIT storms, a TASK then a dropped connection, late PONGs, the
daemon's own heartbeat) and its judgements in :mod:`.quicx_judges`. :mod:`.runner` runs
scenarios against a testee into the server runner's
:class:`~queuewire.conformance.model.TargetRun`, which :mod:`queuewire.conformance.report`
renders (console, JSON, JUnit, HTML with transcripts, a matrix when several clients run) and
:mod:`.markdown` turns into a docs page with each deviation's wire evidence (every testee and
peer string escaped). A client under test is a hostile peer too: :mod:`.records` bounds what a
scenario keeps of it (transcript, checker records, testee log: head and tail with an explicit
omitted-marker), the bunqueue server answers at most ``max_in_flight`` requests of a connection
at once and reads no more meanwhile (the quicx server writes out what a read caused before the
next read), and a testee that breaks the contract (its line limit included) is
that scenario's ERROR, never the run's end. :mod:`.fuzzing` is the
fuzz mode's half (``queuewire fuzz --client``): one request played with the server's replies
replaced by a caller's plan, and whether the testee answered, crashed or hung. Dependencies
point one way: scenarios -> (quicx_)judges -> (quicx_)server -> checker -> records; runner and
fuzzing on top. :mod:`.capabilities` reads a scenario's records (beside the judgements) into
the run's capability table: per capability used, not used (a scenario gave the chance) or not
observable, so that a run with no failing scenario is not mistaken for full support.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ConformanceServer", "Testee", "load_scenarios", "run_client", "select_scenarios",
           "summary_lines"]


def __getattr__(name: str) -> Any:
    if name in ("load_scenarios", "select_scenarios"):
        from . import scenarios
        return getattr(scenarios, name)
    if name == "run_client":
        from .runner import run_client
        return run_client
    if name == "ConformanceServer":
        from .server import ConformanceServer
        return ConformanceServer
    if name == "summary_lines":
        from .capabilities import summary_lines
        return summary_lines
    if name == "Testee":
        from .testee import Testee
        return Testee
    raise AttributeError(name)
