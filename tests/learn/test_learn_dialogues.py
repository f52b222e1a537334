"""Learning the dialogue tables (issue 29): quicx's task dialogue between a producer and a
worker, and bunqueue's auth session. The machines the tables imply, L* (AALpy) against the
reference servers over real TCP under every profile (equal to the tables, nothing left on
the server), and a deliberately broken daemon reported with the shortest sequence, its
requirement and a case that replays it (FAIL against that daemon, PASS against a sound one)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time
from contextlib import contextmanager

import pytest
from click.testing import CliRunner

from queuewire.cli import main
from queuewire.conformance.loader import parse_case
from queuewire.conformance.runner import run_target_sync
from queuewire.learn import Learnable, difference, learn_machine
from queuewire.reference_server.bunqueue import BunqueueServer
from queuewire.reference_server.quicx import QuicxEngine
from queuewire.reference_server.quicx.tcp import QuicxServer
from queuewire.spec import load_profile, profile_names

QUICX = profile_names("quicx")
BUNQUEUE = profile_names("bunqueue")


#: every learning run here is bounded: a budget it spends is an error, not a hang
BUDGET = {"max_queries": 20_000, "max_seconds": 120.0}


def test_the_task_dialogue_tables_imply_the_documented_exchanges():
    v1 = Learnable.of(load_profile("quicx/v1"), "task_dialogue").table
    assert v1.run(["submit", "ready", "done"]) == ["producer:MSG_OK", "worker:MSG_TASK", "quiet"]
    assert v1.run(["ready", "submit", "ready"]) == [
        "worker:MSG_WAIT", "producer:MSG_OK", "worker:MSG_TASK"]          # WAIT, then READY again
    assert v1.run(["done", "submit", "done"]) == [
        "-", "producer:MSG_OK", "worker:MSG_ERROR(INVALID_MESSAGE)"]      # not in flight there
    assert v1.run(["submit", "submit"]) == ["producer:MSG_OK", "-"]       # one task per query
    v103 = Learnable.of(load_profile("quicx/1.0.3"), "task_dialogue").table
    assert v103.run(["ready", "submit", "done"]) == [
        "quiet", "producer:MSG_OK worker:MSG_TASK", "producer:MSG_DONE"]  # held, then forwarded
    assert v103.run(["heartbeat"]) == ["worker:MSG_PONG"]
    assert len(v1.states) == 4 and len(v103.states) == 5


def test_the_auth_session_table_implies_authentication_per_connection():
    subject = Learnable.of(load_profile("bunqueue/v2"), "auth_session")
    assert subject.needs_token
    assert subject.table.run(["ping", "auth_wrong", "auth", "ping", "reconnect", "hello"]) == [
        "client:not_authenticated", "client:invalid_token", "client:ok", "client:ok", "quiet",
        "client:not_authenticated"]


def learn_quicx(profile: str, engine: QuicxEngine | None = None):
    prof = load_profile(profile)
    subject = Learnable.of(prof, "task_dialogue")

    async def go():
        server = await QuicxServer(prof, port=0, engine=engine).start()
        try:
            learned = await asyncio.to_thread(learn_machine, prof, "127.0.0.1", server.port,
                                              subject.section, seed=3, **BUDGET)
            await asyncio.sleep(0.05)      # the last query's closes reach the daemon
            return learned, server.engine.stats()
        finally:
            await server.stop()
    return subject, *asyncio.run(go())


@pytest.mark.parametrize("profile", QUICX)
def test_the_reference_daemon_implements_the_task_dialogue(profile: str):
    subject, learned, stats = learn_quicx(profile)
    assert difference(subject.table, learned.machine) is None
    assert len(learned.machine.states) == len(subject.table.states)
    assert learned.requests > learned.queries > 0
    # nothing is left on the daemon: every query's task was finished, its connections closed
    assert (stats.queue_depth, stats.in_flight, stats.pool_bytes_used) == (0, 0, 0)
    assert stats.accepted == stats.done + stats.failed > 0 and stats.connections == 0


@pytest.mark.parametrize("profile", BUNQUEUE)
def test_the_reference_server_implements_the_auth_session(profile: str):
    prof = load_profile(profile)
    subject = Learnable.of(prof, "auth_session")

    async def go():
        server = await BunqueueServer(prof, port=0, auth_tokens=("learn-token",)).start()
        try:
            return await asyncio.to_thread(learn_machine, prof, "127.0.0.1", server.port,
                                           subject.section, token="learn-token", seed=3,
                                           **BUDGET)
        finally:
            await server.stop()
    learned = asyncio.run(go())
    assert difference(subject.table, learned.machine) is None
    assert len(learned.machine.states) == 2


class ReadyTwice(QuicxEngine):
    """A worker's first MSG_READY on an empty queue is taken and not answered; only its second
    is: a state the table does not have (asked once, not yet answered)."""

    def _ready(self, peer, msg=None):
        asked = self.__dict__.setdefault("_asked", set())
        if not self.queue and peer.id not in asked:
            asked.add(peer.id)
            return []
        return super()._ready(peer, msg)


@contextmanager
def daemon_in_thread(engine: QuicxEngine):
    """A daemon on its own event loop in a thread (the CLI runs a loop of its own)."""
    ready, box = threading.Event(), {}

    def serve():
        loop = asyncio.new_event_loop()
        server = loop.run_until_complete(QuicxServer(engine.profile, port=0, engine=engine).start())
        box.update(loop=loop, port=server.port, stop=asyncio.Event())
        ready.set()
        loop.run_until_complete(box["stop"].wait())
        loop.run_until_complete(server.stop())
        loop.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(10)
    try:
        yield box["port"]
    finally:
        box["loop"].call_soon_threadsafe(box["stop"].set)
        thread.join(10)


def test_a_broken_daemon_is_reported_with_the_shortest_sequence_and_a_case():
    prof = load_profile("quicx/v1")
    subject, learned, _ = learn_quicx("quicx/v1", ReadyTwice(prof))
    assert len(learned.machine.states) > len(subject.table.states)   # a state the table lacks
    (first, *_) = subject.differences(learned.machine)
    assert first.word == ["ready"]
    assert (first.spec, first.server) == (["worker:MSG_WAIT"], ["quiet"])
    assert (first.requirement, first.level) == ("QX-WAIT-1", "MUST")
    steps = first.case["steps"]
    assert steps[0] == {"conn": 2, "role": "worker", "send": {"type": "MSG_READY"},
                        "doc": "input ready",
                        "expect": {"message": {"type": "MSG_WAIT"}, "requirement": "QX-WAIT-1"}}
    assert steps[1]["conn"] == 1 and steps[1]["expect"]["none"] > 0   # the producer hears nothing
    # every difference replays as a case: FAIL against the broken daemon, PASS against a sound one
    cases = [parse_case(d.case, "test", "quicx", prof) for d in subject.differences(learned.machine)]
    with daemon_in_thread(ReadyTwice(prof)) as port:
        broken = run_target_sync("quicx", f"127.0.0.1:{port}", profile=prof, cases=cases[:1],
                                 timeout=0.5)
    sound = run_target_sync("quicx", "embedded", profile=prof, cases=cases, timeout=0.5)
    assert broken.results[0].verdict.value == "FAIL"
    assert {r.verdict.value for r in sound.results} == {"PASS"}


def test_the_command_writes_the_machines_the_cases_and_the_report(tmp_path):
    prof = load_profile("quicx/v1")
    with daemon_in_thread(ReadyTwice(prof)) as port:
        result = CliRunner().invoke(main, [
            "learn", "--protocol", "quicx", "--profile", "quicx/v1",
            "--target", f"127.0.0.1:{port}", "--seed", "3", "--timeout", "0.5",
            "--json", str(tmp_path / "m.json"),
            "--dot", str(tmp_path / "m.dot"), "--report-dir", str(tmp_path / "out"),
            "--markdown", str(tmp_path / "m.md")])
    assert result.exit_code == 1, result.output
    assert "differs after ready: the table says worker:MSG_WAIT, the server answered quiet " \
           "(QX-WAIT-1 (MUST))" in result.output
    data = json.loads((tmp_path / "m.json").read_text())
    assert data["differences"][0]["inputs"] == ["ready"]
    dot = (tmp_path / "m.dot").read_text()
    assert dot.startswith("digraph") and "cluster_learned" in dot and "cluster_table" in dot
    html = (tmp_path / "out" / "report.html").read_text()
    assert "The learned machine" in html and "learn.task_dialogue.ready" in html
    case_file = tmp_path / "out" / "cases" / "learn.task_dialogue.ready.json"
    assert case_file.is_file()
    replay = CliRunner().invoke(main, ["conform", "replay", str(case_file), "--target", "embedded"])
    assert replay.exit_code == 0, replay.output          # the sound daemon passes it
    page = (tmp_path / "m.md").read_text()
    assert "stateDiagram-v2" in page and "| ready | worker:MSG_WAIT | quiet |" in page


def test_a_spent_budget_and_a_missing_token_are_clear_errors():
    runner = CliRunner()
    spent = runner.invoke(main, ["learn", "--target", "embedded", "--max-queries", "5"])
    assert spent.exit_code == 2 and "the query budget (5) is spent" in spent.output
    token = runner.invoke(main, ["learn", "--target", "127.0.0.1:1", "--machine", "auth_session"],
                          env={"QUEUEWIRE_AUTH_TOKEN": ""})
    assert token.exit_code == 2 and "needs the server's token" in token.output
    unknown = runner.invoke(main, ["learn", "--target", "embedded", "--machine", "nope"])
    assert unknown.exit_code == 2 and "job_lifecycle, auth_session" in unknown.output
    mixed = runner.invoke(main, ["learn", "--protocol", "bunqueue", "--profile", "quicx/v1",
                                 "--target", "embedded"])
    assert mixed.exit_code == 2 and "quicx/v1 is a quicx profile, not bunqueue" in mixed.output


def test_an_auth_session_difference_replays_as_a_case_on_fresh_connections():
    # a server that kept a connection's authentication for the next connection would answer
    # ping after auth, reconnect with ok: the case replays that on two connections
    prof = load_profile("bunqueue/v2")
    subject = Learnable.of(prof, "auth_session")
    word = ["auth", "reconnect", "ping"]
    d = subject.difference(word, subject.table.run(word), ["client:ok", "quiet", "client:ok"])
    assert (d.requirement, d.level) == ("BQ-AUTH-2", "MUST")
    steps = d.case["steps"]
    assert steps[0] == {"conn": 1, "auth": False, "send": {"cmd": "Auth", "token": "${token}"},
                        "doc": "input auth", "expect": {"ok": {}, "requirement": "BQ-AUTH-3"}}
    assert steps[1] == {"conn": 1, "close": True, "doc": "input reconnect"}
    assert steps[2]["conn"] == 2 and steps[2]["auth"] is False
    assert steps[2]["expect"] == {"error": "not_authenticated", "requirement": "BQ-AUTH-2"}
    run = run_target_sync("bunqueue", "embedded", profile=prof, auth_token="case-token",
                          cases=[parse_case(d.case, "test", "bunqueue", prof)])
    assert run.results[0].verdict.value == "PASS"          # the reference server forgets


@contextmanager
def tcp_server(handle):
    """A TCP server on 127.0.0.1 whose connections ``handle(sock)`` serves, one thread each."""
    listener = socket.create_server(("127.0.0.1", 0))
    stop = threading.Event()

    def accept():
        listener.settimeout(0.1)
        while not stop.is_set():
            try:
                sock, _ = listener.accept()
            except TimeoutError:
                continue
            threading.Thread(target=handle, args=(sock,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield listener.getsockname()[1]
    finally:
        stop.set()
        thread.join(5)
        listener.close()


def test_a_daemon_that_never_answers_ends_the_run_with_exit_2_not_a_hang():
    def silent(sock):        # reads everything, answers nothing
        with sock:
            while sock.recv(65536):
                pass
    with tcp_server(silent) as port:
        started = time.monotonic()
        result = CliRunner().invoke(main, ["learn", "--profile", "quicx/v1", "--target",
                                           f"127.0.0.1:{port}", "--timeout", "0.3"])
    assert result.exit_code == 2, result.output
    assert "did not answer" in result.output and "MSG_PONG" in result.output
    assert time.monotonic() - started < 10


def test_a_server_that_closes_connections_is_learned_with_closed_outputs():
    def closes(sock):        # closes a connection at its first frame
        with sock:
            sock.recv(65536)
    with tcp_server(closes) as port:
        result = CliRunner().invoke(main, ["learn", "--machine", "auth_session", "--target",
                                           f"127.0.0.1:{port}", "--timeout", "1"],
                                    env={"QUEUEWIRE_AUTH_TOKEN": "t"})
    assert result.exit_code == 1, result.output          # it differs: a result, not an error
    assert "the server answered client:closed" in result.output


def test_a_difference_after_a_reading_row_is_judged_no_harder_than_should():
    subject = Learnable.of(load_profile("bunqueue/v2"), "auth_session")
    # a server that drops authentication after a refused Auth: the table's row that keeps it
    # is a reading (level SHOULD), so the ping that shows the difference is capped
    word = ["auth", "auth_wrong", "ping"]
    d = subject.difference(word, subject.table.run(word),
                           ["client:ok", "client:invalid_token", "client:not_authenticated"])
    assert (d.requirement, d.level) == ("BQ-AUTH-1", "SHOULD")
    expects = [s["expect"] for s in d.case["steps"]]
    assert expects[1] == {"error": "invalid_token", "requirement": "BQ-AUTH-3"}   # the reply: MUST
    assert expects[2] == {"ok": {}, "requirement": "BQ-AUTH-1", "level": "SHOULD"}
    # without the reading row in the word the rule keeps its level
    plain = subject.difference(["ping"], ["client:not_authenticated"], ["client:ok"])
    assert (plain.requirement, plain.level) == ("BQ-AUTH-2", "MUST")
