"""Interop with the REAL bunqueue clients against our reference server.

Both clients run against ``queuewire serve bunqueue --port 0 --profile bunqueue/2.9.5`` (a
subprocess), the documented extension profile that describes what they need beyond
documents 000-002 (spec/overlays/bunqueue-2.9.5.yaml: SubscribeEvents and pushed event
frames, Hello version 3 with separate-job-name, the job name apart from data or inside it):

- the npm client ``bunqueue/client`` 2.9.5 (Bun-only; run with the ``bun`` 1.4.4 binary that
  ``make setup`` installs into tests/interop/node_modules) via ``bunqueue_js_client.mjs``,
  with a QueueEvents listener next to its Worker (both subscribe with SubscribeEvents);
- the PyPI package ``bunqueue-client`` (import name ``bunqueue``; the ``test`` extra).

Each client is run for: push and process N jobs (each exactly once; the server's own
GetJobCounts, asked over a separate raw connection, says ``completed == N``); a job whose
first attempt fails and is retried after its backoff, then completes; a server with
``--auth-tokens`` and the client configured with the token; and heartbeats that keep a job
that runs longer than the server's stall interval from stalling. Any error a client reports
fails the test. Skipped, with the reason, only where node itself is missing.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest

from serve_process import start_serve, stop_serve

HERE = Path(__file__).parent
ROOT = HERE.parent.parent
NODE = shutil.which("node")
BUN = HERE / "node_modules" / ".bin" / "bun"
PROFILE = "bunqueue/2.9.5"
N_JOBS = 20
N_SMALL = 4          # jobs in the retry / auth / heartbeat scenarios
TOKEN = "interop-s3cret"
STALL_MS = 1000      # the server's stall interval in the heartbeat scenarios
WORK_MS = 3000       # how long a job runs there: three stall intervals
HEARTBEAT_MS = 200   # the clients' heartbeat interval there

needs_node = pytest.mark.skipif(
    NODE is None, reason="node is not installed: the npm bunqueue client interop needs "
                         "node/npm (the Makefile installs bun)")


class Server:
    def __init__(self, *args: str):
        self.proc, self.port = start_serve("bunqueue", "--profile", PROFILE, *args)
        self.token: str | None = TOKEN if "--auth-tokens" in args else None

    def call(self, command: dict[str, Any]) -> dict[str, Any]:
        """One framed msgpack request/reply on a fresh connection (Auth first if needed)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=10) as sock:
            if self.token is not None:
                assert raw_exchange(sock, {"cmd": "Auth", "token": self.token})["ok"] is True
            return raw_exchange(sock, command)

    def counts(self, queue: str) -> dict[str, Any]:
        reply = self.call({"cmd": "GetJobCounts", "queue": queue})
        assert reply.get("ok") is True, reply
        return reply["counts"]

    def job(self, job_id: str) -> dict[str, Any]:
        reply = self.call({"cmd": "GetJob", "id": job_id})
        assert reply.get("ok") is True, reply
        return reply["job"]

    def assert_all_completed(self, queue: str, n: int) -> None:
        counts = self.counts(queue)
        assert counts["completed"] == n, counts
        assert counts["waiting"] == counts["active"] == counts["failed"] == 0, counts
        assert counts["delayed"] == 0, counts


def raw_exchange(sock: socket.socket, command: dict[str, Any]) -> dict[str, Any]:
    payload = msgpack.packb({**command, "reqId": "interop-1"}, use_bin_type=True)
    sock.sendall(struct.pack(">I", len(payload)) + payload)
    buf = b""
    while True:
        if len(buf) >= 4:
            (length,) = struct.unpack(">I", buf[:4])
            if len(buf) >= 4 + length:
                # ext 0 is msgpackr's `undefined`: treat as absent (None).
                return msgpack.unpackb(buf[4:4 + length], raw=False,
                                       ext_hook=lambda code, data: None)
        chunk = sock.recv(65536)
        assert chunk, "server closed the connection before replying"
        buf += chunk


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        stop_serve(s.proc)


@pytest.fixture
def auth_server() -> Iterator[Server]:
    s = Server("--auth-tokens", TOKEN)
    try:
        yield s
    finally:
        stop_serve(s.proc)


@pytest.fixture
def stall_server() -> Iterator[Server]:
    s = Server("--stall-interval", str(STALL_MS), "--max-stalls", "1")
    try:
        yield s
    finally:
        stop_serve(s.proc)


def assert_exactly_once(pushed: list[str], processed: list[str], n: int) -> None:
    assert len(pushed) == n and len(set(pushed)) == n, pushed
    dup = {i: c for i, c in Counter(processed).items() if c > 1}
    assert not dup, f"processed more than once: {dup}"
    assert set(processed) == set(pushed), (set(pushed) ^ set(processed))


# -- the npm client --------------------------------------------------------------------------
def run_js(port: int, queue: str, count: int, timeout_ms: int = 20000,
           **env: str) -> list[dict[str, Any]]:
    """Run the npm driver; fail on any error it reports or a non-zero exit."""
    if not BUN.exists() or not (HERE / "node_modules" / "bunqueue").is_dir():
        pytest.fail("bun/bunqueue are not installed in tests/interop: run `make setup`")
    proc = subprocess.run([str(BUN), str(HERE / "bunqueue_js_client.mjs"), str(port),
                           str(count), str(timeout_ms)], check=False, cwd=HERE,
                          capture_output=True, text=True, timeout=timeout_ms / 1000 + 40,
                          env={**os.environ, "BUNQUEUE_QUEUE": queue, **env})
    events = []
    for line in proc.stdout.splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            pass  # the client library may log plain text
    report = f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    errors = [e for e in events if e["event"] == "error"]
    assert not errors, report
    assert proc.returncode == 0, report
    return events


def of(events: list[dict[str, Any]], kind: str, key: str = "id") -> list[Any]:
    return [e[key] for e in events if e["event"] == kind]


@needs_node
def test_npm_client_pushes_processes_and_hears_events(server: Server) -> None:
    queue = f"interop-js-{uuid.uuid4().hex[:8]}"
    events = run_js(server.port, queue, N_JOBS)
    pushed, processed = of(events, "pushed"), of(events, "processed")
    assert_exactly_once(pushed, processed, N_JOBS)
    assert sorted(of(events, "completed")) == sorted(pushed)
    assert sorted(of(events, "processed", "n")) == list(range(N_JOBS))
    assert set(of(events, "processed", "name")) == {"interop"}  # the name sent apart from data
    # QueueEvents heard every completion through the server's pushed event frames
    results = {e["id"]: e["returnvalue"] for e in events if e["event"] == "qe_completed"}
    n_of = {e["id"]: e["n"] for e in events if e["event"] == "pushed"}
    assert results == {i: {"double": 2 * n_of[i]} for i in pushed}
    client_counts = next(e["counts"] for e in events if e["event"] == "counts")
    assert client_counts["completed"] == N_JOBS, client_counts
    server.assert_all_completed(queue, N_JOBS)
    job = server.job(pushed[0])
    assert (job["name"], job["data"]) == ("interop", {"n": 0})


@needs_node
def test_npm_client_job_fails_then_is_retried_and_completes(server: Server) -> None:
    queue = f"interop-js-retry-{uuid.uuid4().hex[:8]}"
    events = run_js(server.port, queue, N_SMALL, BUNQUEUE_FAIL_FIRST="1")
    pushed = of(events, "pushed")
    attempts = Counter(of(events, "processed"))
    assert attempts == {i: 2 for i in pushed}, attempts      # first attempt, then the retry
    assert sorted(of(events, "attempt_failed")) == sorted(pushed)
    assert sorted(of(events, "qe_failed")) == sorted(pushed)  # failed event frames
    assert sorted(of(events, "completed")) == sorted(pushed)
    server.assert_all_completed(queue, N_SMALL)
    for job_id in pushed:
        job = server.job(job_id)
        assert job["attempts"] == 1 and job["state"] == "completed", job


@needs_node
def test_npm_client_with_an_auth_token(auth_server: Server) -> None:
    # the gate is on: a connection without Auth is refused
    with socket.create_connection(("127.0.0.1", auth_server.port), timeout=10) as sock:
        reply = raw_exchange(sock, {"cmd": "Ping"})
    assert reply["ok"] is False and reply["error"] == "Not authenticated", reply
    queue = f"interop-js-auth-{uuid.uuid4().hex[:8]}"
    events = run_js(auth_server.port, queue, N_SMALL, BUNQUEUE_TOKEN=TOKEN)
    pushed = of(events, "pushed")
    assert_exactly_once(pushed, of(events, "processed"), N_SMALL)
    assert sorted(of(events, "qe_completed")) == sorted(pushed)
    auth_server.assert_all_completed(queue, N_SMALL)


@needs_node
def test_npm_client_heartbeats_keep_a_long_job_from_stalling(stall_server: Server) -> None:
    queue = f"interop-js-hb-{uuid.uuid4().hex[:8]}"
    events = run_js(stall_server.port, queue, 2, 30000, BUNQUEUE_WORK_MS=str(WORK_MS),
                    BUNQUEUE_HEARTBEAT_MS=str(HEARTBEAT_MS))
    pushed = of(events, "pushed")
    # without JobHeartbeat(B) the job would stall after STALL_MS and, with --max-stalls 1,
    # fail for good: the processor's ACK would then be refused
    assert_exactly_once(pushed, of(events, "processed"), 2)
    stall_server.assert_all_completed(queue, 2)
    for job_id in pushed:
        job = stall_server.job(job_id)
        assert job["stallCount"] == 0 and job["attempts"] == 0, job


# -- the Python client -------------------------------------------------------------------------
class PyRun:
    """A bunqueue-client Queue and Worker on one queue, recording what the Worker reports."""

    def __init__(self, server: Server, queue: str, n: int, *, fail_first: bool = False,
                 work_s: float = 0.0, **worker_opts: Any):
        try:
            from bunqueue import Queue, Worker
        except ImportError:
            pytest.fail("bunqueue-client is not installed: pip install -e '.[test]' (make setup)")
        self.n = n
        self.lock = threading.Lock()
        self.done = threading.Event()
        self.processed: list[str] = []
        self.completed: list[str] = []
        self.failed: list[str] = []
        self.errors: list[str] = []
        self.during: list[tuple[Any, dict]] = []  # (job's startedAt, ListWorkers reply)
        auth = {"token": server.token} if server.token else {}
        self.queue = Queue(queue, host="127.0.0.1", port=server.port, **auth)
        self._worker_args = (Worker, queue, server, auth, fail_first, work_s, worker_opts)
        self.worker = None

    def start(self) -> None:
        worker_cls, queue, server, auth, fail_first, work_s, opts = self._worker_args

        def process(job: Any) -> dict[str, int]:
            with self.lock:
                self.processed.append(str(job.id))
                first = self.processed.count(str(job.id)) == 1
            if work_s:
                time.sleep(work_s)
                self.during.append((job.started_at, server.call({"cmd": "ListWorkers"})))
            if fail_first and first:
                raise RuntimeError(f"first attempt fails: {job.id}")
            return {"double": job.data["n"] * 2}

        def on_completed(job: Any, *rest: Any) -> None:
            with self.lock:
                self.completed.append(str(job.id))
                if len(self.completed) >= self.n:
                    self.done.set()

        def on_failed(job: Any, err: Any, *rest: Any) -> None:
            with self.lock:
                if fail_first and str(err).startswith("first attempt fails"):
                    self.failed.append(str(job.id))
                else:
                    self.errors.append(f"{job.id}: {err}")

        self.worker = worker_cls(queue, process, host="127.0.0.1", port=server.port,
                                 concurrency=2, poll_timeout_ms=200, **auth, **opts)
        self.worker.on("completed", on_completed)
        self.worker.on("error", lambda err, *rest: self.errors.append(str(err)))
        self.worker.on("failed", on_failed)

    def wait(self, timeout: float) -> None:
        assert self.done.wait(timeout), (f"{len(self.completed)}/{self.n} completed; processed "
                                         f"{len(self.processed)}; errors {self.errors}")
        self.worker.close(timeout=10)
        self.worker = None
        assert not self.errors, self.errors

    def close(self) -> None:
        if self.worker is not None:
            self.worker.close(timeout=5)
        self.queue.close()


def test_python_client_pushes_and_processes(server: Server) -> None:
    queue_name = f"interop-py-{uuid.uuid4().hex[:8]}"
    run = PyRun(server, queue_name, N_JOBS)
    try:
        pushed = [str(run.queue.add("interop", {"n": n}).id) for n in range(N_JOBS)]
        run.start()
        run.wait(20)
        assert_exactly_once(pushed, run.processed, N_JOBS)
        assert sorted(run.completed) == sorted(pushed)
        assert run.queue.get_job_counts()["completed"] == N_JOBS
        server.assert_all_completed(queue_name, N_JOBS)
        # bunqueue-client sends the name inside data; the profile splits it out (BQ-NAME-102)
        job = server.job(pushed[0])
        assert (job["name"], job["data"]) == ("interop", {"n": 0})
    finally:
        run.close()


def test_python_client_job_fails_then_is_retried_and_completes(server: Server) -> None:
    queue_name = f"interop-py-retry-{uuid.uuid4().hex[:8]}"
    run = PyRun(server, queue_name, N_SMALL, fail_first=True)
    try:
        pushed = [str(run.queue.add("interop", {"n": n}, attempts=2, backoff=50).id)
                  for n in range(N_SMALL)]
        run.start()
        run.wait(20)
        assert Counter(run.processed) == {i: 2 for i in pushed}
        assert sorted(run.failed) == sorted(pushed)
        assert sorted(run.completed) == sorted(pushed)
        server.assert_all_completed(queue_name, N_SMALL)
        for job_id in pushed:
            job = server.job(job_id)
            assert job["attempts"] == 1 and job["state"] == "completed", job
    finally:
        run.close()


def test_python_client_with_an_auth_token(auth_server: Server) -> None:
    with socket.create_connection(("127.0.0.1", auth_server.port), timeout=10) as sock:
        reply = raw_exchange(sock, {"cmd": "Ping"})
    assert reply["ok"] is False and reply["error"] == "Not authenticated", reply
    queue_name = f"interop-py-auth-{uuid.uuid4().hex[:8]}"
    run = PyRun(auth_server, queue_name, N_SMALL)
    try:
        pushed = [str(run.queue.add("interop", {"n": n}).id) for n in range(N_SMALL)]
        run.start()
        run.wait(20)
        assert_exactly_once(pushed, run.processed, N_SMALL)
        auth_server.assert_all_completed(queue_name, N_SMALL)
    finally:
        run.close()


def test_python_client_worker_heartbeats(stall_server: Server) -> None:
    queue_name = f"interop-py-hb-{uuid.uuid4().hex[:8]}"
    run = PyRun(stall_server, queue_name, 2, work_s=WORK_MS / 1000,
                heartbeat_interval_s=HEARTBEAT_MS / 1000)
    try:
        pushed = [str(run.queue.add("interop", {"n": n}).id) for n in range(2)]
        run.start()
        run.wait(30)
        # JobHeartbeatB kept both jobs from stalling (--max-stalls 1 would have failed them)
        assert_exactly_once(pushed, run.processed, 2)
        stall_server.assert_all_completed(queue_name, 2)
        for job_id in pushed:
            job = stall_server.job(job_id)
            assert job["stallCount"] == 0 and job["attempts"] == 0, job
        # the worker registered (RegisterWorker) before it pulled, and its Heartbeat commands
        # reached the server while the job ran: only a Heartbeat moves lastSeen (BQ-REG-1),
        # so without one it would still be the registration time, before the job started
        assert len(run.during) == 2
        for started_at, listing in run.during:
            assert listing["ok"] is True, listing
            [worker] = listing["data"]["workers"]
            assert worker["queues"] == [queue_name]
            assert started_at is not None and worker["lastSeen"] > started_at, \
                (started_at, worker)
    finally:
        run.close()
