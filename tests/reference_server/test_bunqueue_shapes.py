"""No special case keyed on a request's shape (issue 26): the same jobs cost the server about
the same CPU whichever client's entry shape carries them.

The shapes are those real clients send (benchmarks/server_bench.py sends the same ones over
TCP): queuewire's client and the JS client's PUSH (name and data), the JS client's PUSHB
entries (``bunqueue/client`` 2.9.5 adds ``removeOnComplete: false, removeOnFail: false`` to
each), the PyPI ``bunqueue-client``'s (the name inside data, no top-level name), and a PUSH
with common options (priority, delay, attempts, backoff, jobId). Each shape's requests go
through the server's whole per-request path without a socket: one sans-IO
:class:`~queuewire.reference_server.bunqueue.connection.BunqueueConnection` decodes them, its
gate validates them, the engine creates the jobs and the reply frames are encoded. The CPU
time of this process is taken per job (``time.process_time``, so other processes on the
machine do not count), as the best of several interleaved rounds with the collector paused
(a collection lands on whichever shape is running), and every shape must come within
``BOUND`` of the cheapest shape of the same command.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import pytest

from queuewire.codecs.bunqueue import FrameEncoder
from queuewire.reference_server.bunqueue import BunqueueEngine
from queuewire.reference_server.bunqueue.connection import BunqueueConnection
from queuewire.reference_server.bunqueue.gate import RequestGate
from queuewire.reference_server.bunqueue.store import NullStore
from queuewire.spec import load_profile

BOUND = 1.3     # the bound: CPU per job within 1.3x of the cheapest shape
ROUNDS = 9      # interleaved rounds per shape; the best is kept
BATCH = 100     # jobs per PUSHB
JOBS = {"PUSH": 2_000, "PUSHB": 5_000}


def _data(i: int) -> dict:
    return {"to": f"user{i % 997}@example.com", "template": "welcome", "n": i}


Shape = Callable[[int], dict]
#: per command, the shapes of one job as each client writes it
SHAPES: dict[str, dict[str, Shape]] = {
    "PUSH": {
        "queuewire, JS": lambda i: {"name": "email", "data": _data(i)},
        "PyPI": lambda i: {"data": {"name": "email", **_data(i)}},
        "options": lambda i: {"name": "email", "data": _data(i), "priority": i % 5,
                              "delay": 1_000, "maxAttempts": 3, "backoff": 1_000,
                              "jobId": f"job-{i}"},
    },
    "PUSHB": {
        "queuewire": lambda i: {"name": "email", "data": _data(i)},
        "JS": lambda i: {"name": "email", "data": _data(i), "removeOnComplete": False,
                         "removeOnFail": False},
        "PyPI": lambda i: {"data": {"name": "email", **_data(i)}},
    },
}


class _Room:
    """The wait room a shell would give: no long poll is parked here."""

    def full(self) -> bool:
        return False


def _requests(command: str, shape: Shape, n: int) -> list[dict]:
    if command == "PUSH":
        return [{"cmd": "PUSH", "queue": "q", "reqId": str(i), **shape(i)} for i in range(n)]
    return [{"cmd": "PUSHB", "queue": "q", "reqId": str(b),
             "jobs": [shape(b * BATCH + k) for k in range(BATCH)]} for b in range(n // BATCH)]


def _cpu_per_job(profile: Any, stream: bytes, jobs: int) -> float:
    """Microseconds of this process's CPU per job for a fresh server connection to take
    ``stream`` and answer every request in it."""
    engine = BunqueueEngine(profile, store=NullStore())
    connection = BunqueueConnection("c1", RequestGate(engine), FrameEncoder(profile), _Room(),
                                    max_in_flight=1_000, slots_before_hello=1_000)
    replies = 0
    start = time.process_time()
    for at in range(0, len(stream), 65_536):
        connection.receive_data(stream[at:at + 65_536])
        while connection.pending:
            replies += len(connection.next_actions(128, 65_536))
    spent = time.process_time() - start
    assert engine.total_pushed == jobs, "not every job was created"
    assert replies > 0
    return spent / jobs * 1e6


@pytest.mark.parametrize("profile_name", ["bunqueue/v2", "bunqueue/2.9.5"])
@pytest.mark.parametrize("command", ["PUSH", "PUSHB"])
def test_every_client_shape_costs_within_the_bound_of_the_cheapest(profile_name: str,
                                                                    command: str) -> None:
    profile = load_profile(profile_name)
    encoder = FrameEncoder(profile)
    jobs = JOBS[command]
    streams = {name: b"".join(encoder.encode(r) for r in _requests(command, shape, jobs))
               for name, shape in SHAPES[command].items()}
    best = dict.fromkeys(streams, float("inf"))
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for _ in range(ROUNDS):
            for name, stream in streams.items():
                best[name] = min(best[name], _cpu_per_job(profile, stream, jobs))
    finally:
        if collecting:
            gc.enable()
    cheapest = min(best.values())
    shown = {name: f"{us:.2f} us ({us / cheapest:.2f}x)" for name, us in best.items()}
    assert max(best.values()) <= BOUND * cheapest, f"{command} per job: {shown}"
