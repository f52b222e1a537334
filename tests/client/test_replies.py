"""The client takes an ``ok`` answer only when the fields present have their documented types
(client/replies.py): sans-IO through the session, and through the SDK over real TCP against a
server that answers with the wrong shapes."""

from __future__ import annotations

import asyncio
import random

import pytest

from queuewire.client import BunqueueReplyInvalid, ClientError, Queue, Worker
from queuewire.client.bunqueue_session import BunqueueSession, SessionState
from queuewire.client.options import ConnectionOptions
from queuewire.client.replies import ReplyShapes
from queuewire.client.session import RequestState
from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from queuewire.spec import load_profile

PROFILE = "bunqueue/v2"
SPEC = load_profile(PROFILE).model


def _ready_session() -> tuple[BunqueueSession, FrameDecoder, FrameEncoder]:
    opts = ConnectionOptions.from_profile(PROFILE, {"port": 6789, "ping_interval": 0})
    session = BunqueueSession(PROFILE, opts, clock=lambda: 1000.0, rng=random.Random(1))
    decoder, encoder = FrameDecoder(PROFILE), FrameEncoder(PROFILE)
    session.start()
    session.connected()
    hello = decoder.feed(session.data_to_send())[0]
    session.receive_data(encoder.encode({"ok": True, "protocolVersion": 2,
                                         "capabilities": ["pipelining"],
                                         "reqId": hello["reqId"]}))
    assert session.state is SessionState.READY
    return session, decoder, encoder


def _answer(payload: dict, **reply):
    session, decoder, encoder = _ready_session()
    command = session.send(payload)
    request = decoder.feed(session.data_to_send())[0]
    session.receive_data(encoder.encode({"ok": True, **reply, "reqId": request["reqId"]}))
    return session, command


def test_a_wrong_typed_field_fails_the_command_with_the_commands_rule_and_keeps_the_link():
    session, command = _answer({"cmd": "PUSH", "queue": "q", "data": {}}, id=False)
    assert command.state is not RequestState.ANSWERED
    assert isinstance(command.error, BunqueueReplyInvalid)
    assert isinstance(command.error, ClientError)
    assert command.error.requirement == SPEC.commands["PUSH"].requirement
    assert "/id" in command.error.problem
    assert command.error.reply["id"] is False
    assert session.state is SessionState.READY  # one bad answer is not a dead link


@pytest.mark.parametrize("ok", ["missing", 1, "true", None])
def test_an_answer_whose_ok_is_not_true_and_has_no_error_is_invalid(ok):
    session, decoder, encoder = _ready_session()
    command = session.send({"cmd": "Count", "queue": "q"})
    request = decoder.feed(session.data_to_send())[0]
    reply = {"count": 1, "reqId": request["reqId"]} | ({} if ok == "missing" else {"ok": ok})
    session.receive_data(encoder.encode(reply))
    assert isinstance(command.error, BunqueueReplyInvalid)
    assert "/ok" in command.error.problem
    ok_rule = SPEC.commands["Count"].response["properties"]["ok"]["x-requirement"]
    assert command.error.requirement == ok_rule


def test_a_wrong_type_deep_inside_a_job_is_caught_with_its_path():
    job = {"id": "j1", "queue": "q", "data": {}, "priority": "high"}
    _, command = _answer({"cmd": "PULLB", "queue": "q", "count": 1}, jobs=[job], tokens=[])
    assert isinstance(command.error, BunqueueReplyInvalid)
    assert "/jobs/0/priority" in command.error.problem


def test_valid_answers_and_answers_missing_optional_or_required_fields_are_taken():
    _, command = _answer({"cmd": "PUSH", "queue": "q", "data": {}}, id="j1")
    assert command.state is RequestState.ANSWERED and command.result["id"] == "j1"
    # the real bunqueue 2.9.5 answers JobHeartbeat without "data": the client takes it
    _, command = _answer({"cmd": "JobHeartbeat", "id": "j1"})
    assert command.state is RequestState.ANSWERED


def test_every_command_of_every_profile_has_a_compiled_lenient_shape():
    for name in ("bunqueue/v2", "bunqueue/2.9.5"):
        profile = load_profile(name)
        shapes = ReplyShapes(profile)
        for cmd, command in profile.model.commands.items():
            assert shapes.requirements[cmd] == command.requirement
            assert shapes.problem(cmd, {"ok": True}) is None  # nothing present, nothing wrong
            assert shapes.problem(cmd, {"ok": "yes"}) is not None


class ShapeServer:
    """Answers Hello, then every command with ``answers[cmd]`` (plus ok and its reqId)."""

    def __init__(self, answers: dict[str, dict]):
        self.answers = answers
        self.server: asyncio.AbstractServer | None = None

    async def __aenter__(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def __aexit__(self, *exc) -> None:
        assert self.server is not None
        self.server.close()
        await self.server.wait_closed()

    async def _serve(self, reader, writer) -> None:
        decoder, encoder = FrameDecoder(PROFILE), FrameEncoder(PROFILE)
        try:
            while data := await reader.read(65536):
                for frame in decoder.feed(data):
                    cmd = frame.get("cmd")
                    extra = ({"protocolVersion": 2, "capabilities": ["pipelining"]}
                             if cmd == "Hello" else self.answers.get(cmd, {}))
                    writer.write(encoder.encode({"ok": True, **extra, "reqId": frame["reqId"]}))
        except ConnectionError:
            pass
        finally:
            writer.close()


OPTIONS = {"ping_interval": 0, "pool_size": 1, "command_timeout": 2000}


@pytest.mark.asyncio
@pytest.mark.parametrize("answers, call, fragment", [
    ({"PUSH": {}}, lambda q: q.add("n", {}), "/id is missing"),
    ({"PUSH": {"id": False}}, lambda q: q.add("n", {}), "/id"),
    ({"Count": {"count": "many"}}, lambda q: q.count(), "/count"),
    ({"Count": {}}, lambda q: q.count(), "/count is missing"),   # not a made-up 0
    ({"GetJobCounts": {"counts": [1, 2]}}, lambda q: q.get_job_counts(), "/counts"),
    ({"GetJobs": {"jobs": [{"queue": "q", "data": {}}]}}, lambda q: q.get_jobs(), "/id is missing"),
])
async def test_the_sdk_raises_the_typed_error_never_a_plain_python_one(answers, call, fragment):
    async with ShapeServer(answers) as port, Queue("q", connection={**OPTIONS, "port": port}) as q:
        with pytest.raises(BunqueueReplyInvalid) as caught:
            await call(q)
        assert fragment in str(caught.value)
        assert caught.value.requirement


@pytest.mark.asyncio
async def test_a_worker_reports_a_pulled_job_without_id_and_goes_on():
    answers = {"PULLB": {"jobs": [{"queue": "q", "data": {}}], "tokens": ["t"]}}
    errors: list[Exception] = []
    async with ShapeServer(answers) as port:
        async with Worker("q", lambda job: None, connection={**OPTIONS, "port": port},
                          on_error=errors.append):
            for _ in range(200):
                if errors:
                    break
                await asyncio.sleep(0.01)
    assert errors and isinstance(errors[0], BunqueueReplyInvalid)
    assert "/jobs/0/id is missing" in str(errors[0])
