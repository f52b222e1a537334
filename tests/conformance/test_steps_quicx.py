"""Every quicx step kind and outcome of the case language, over real TCP.

Against the embedded reference daemon in both profiles (producer and worker flows, roles,
hand-made headers, error codes, saved task ids), and against small fake daemons for what only
a misbehaving one shows: silence, an immediate close, a message the role must not receive,
and the "unknown message type" answer that makes a case UNIMPLEMENTED.
"""

from __future__ import annotations

import asyncio
import textwrap

import pytest
from test_runner import one, run_on

from queuewire.codecs.quicx import QuicxDecoder, QuicxEncoder
from queuewire.conformance import runner
from queuewire.conformance.context import CaseContext
from queuewire.conformance.loader import CaseError, load_text
from queuewire.conformance.model import Verdict
from queuewire.spec import load_profile


def case(steps: str, requirements: str = "[QX-MSG-1]", extra: str = "") -> str:
    return ("cases:\n  - id: t.qx\n    title: a quicx case\n"
            f"    requirements: {requirements}\n{extra}    steps:\n" +
            "".join(f"      {line}\n" for line in steps.strip("\n").splitlines()))


async def embedded(text: str, profile: str = "quicx/v1", **kw):
    return one(await run_on(text, "embedded", protocol="quicx", profile=profile, **kw))


def failed(r) -> list[str]:
    return [c.message for c in r.failed_checks]


class FakeQuicx:
    """A quicx daemon answering each decoded message with ``behave(message)``: a list of
    frames (bytes) to write, "close", or None (silence)."""

    def __init__(self, profile: str, behave):
        self.profile = profile
        self.behave = behave
        self.port = 0

    async def __aenter__(self):
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc):
        self._server.close()
        await self._server.wait_closed()

    async def _serve(self, reader, writer):
        dec = QuicxDecoder(self.profile, None)
        try:
            while data := await reader.read(65536):
                for msg in dec.feed(data):
                    out = self.behave(msg)
                    if out == "close":
                        return
                    for frame in out or ():
                        writer.write(frame)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


async def run_fake(text: str, profile: str, behave, timeout: float = 0.4):
    async def go():
        async with FakeQuicx(profile, behave) as fake:
            return await run_on(text, f"127.0.0.1:{fake.port}", protocol="quicx",
                                profile=profile, timeout=timeout)
    return one(await go())


@pytest.mark.parametrize("profile", ["quicx/v1", "quicx/1.0.3"])
@pytest.mark.asyncio
async def test_producer_and_worker_flow(profile):
    r = await embedded(case("""
- send: {type: MSG_SUBMIT, fields: {task_type: email, payload: "hex:0102ff"}}
  expect: {message: {type: MSG_OK, fields: {task_id: {$type: int}}}}
  save: {tid: task_id}
- conn: 2
  role: worker
  send: {type: MSG_READY}
  expect: {message: {type: MSG_TASK, fields: {task_id: "${tid}", task_type: email, payload: "hex:0102ff"}}}
- conn: 2
  send: {type: MSG_DONE, fields: {task_id: "${tid}"}}
"""), profile)
    assert r.verdict is Verdict.PASS, failed(r) or r.error
    opens = [e.note for e in r.transcript.events if e.direction == "open"]
    assert opens[0].endswith("as producer") and opens[1].endswith("as worker")
    recv = [e.decoded for e in r.transcript.events if e.direction == "recv"]
    assert recv[0]["type"] == "MSG_OK" and recv[1]["fields"]["payload"] == "0102ff"


@pytest.mark.asyncio
async def test_error_codes_raw_headers_none_and_close():
    spec = load_profile("quicx/v1").model
    bad_version = max(spec.accepted_versions) + 1
    r = await embedded(case(f"""
- send_raw: {{header: {{version: {bad_version}, type: MSG_SUBMIT}}, payload: "0161"}}
  expect: {{error: INVALID_MESSAGE}}
- send_raw: {{header: {{type: 250}}}}
  expect: {{any_of: [{{error: true}}, {{close: true}}]}}
- send: {{type: MSG_HEARTBEAT}}
  expect: {{any_of: [{{message: {{type: MSG_PONG}}}}, {{none: 150}}]}}
- send_raw: "01 01 00 00 00 10 00"
  expect: {{none: 100}}
- close: true
""", "[QX-HDR-1]"))
    assert r.verdict is Verdict.PASS, failed(r) or r.error


@pytest.mark.asyncio
async def test_wrong_error_code_and_message_type_are_explained():
    r = await embedded(case("""
- send_raw: {header: {version: 9, type: MSG_SUBMIT}, payload: "0161"}
  expect: {error: QUEUE_FULL}
"""))
    assert r.verdict is Verdict.FAIL
    assert "got error code 2 (INVALID_MESSAGE)" in failed(r)[0]
    r = await embedded(case("""
- send: {type: MSG_SUBMIT, fields: {task_type: a, payload: b}}
  expect: {message: {type: MSG_TASK}}
"""))
    assert r.verdict is Verdict.FAIL and "got MSG_OK" in failed(r)[0]


@pytest.mark.asyncio
async def test_silent_closing_and_off_role_daemons():
    text = case("""
- send: {type: MSG_SUBMIT, fields: {task_type: a, payload: b}}
  expect: {message: {type: MSG_OK}}
""", extra="    command: MSG_SUBMIT\n")
    r = await run_fake(text, "quicx/v1", lambda m: None, timeout=0.2)
    assert r.verdict is Verdict.FAIL and "no message within" in failed(r)[0]
    r = await run_fake(text, "quicx/v1", lambda m: "close")
    assert r.verdict is Verdict.FAIL and "closed" in failed(r)[0]
    enc = QuicxEncoder("quicx/v1")
    # MSG_TASK to a producer: the producer-role decoder refuses it
    task = enc.encode("MSG_TASK", task_id=1, task_type="a", payload=b"b")
    r = await run_fake(text, "quicx/v1", lambda m: [task])
    assert r.verdict is Verdict.FAIL and "do not decode" in failed(r)[0]
    assert any(e.direction == "note" for e in r.transcript.events)
    # the "unknown message type" answer to the command under test says UNIMPLEMENTED only
    # where no other refusal shares its code: in both profiles it is shared (v1: every invalid
    # frame is INVALID_MESSAGE; 1.0.3: 0x04 is also an unknown task type), so it is a FAIL
    for profile in ("quicx/v1", "quicx/1.0.3"):
        spec = load_profile(profile).model
        code = spec.error_code(spec.protocol_errors["unknown_type"].error_code)
        err = QuicxEncoder(profile).encode("MSG_ERROR", error_code=code, message="unknown")
        r = await run_fake(text, profile, lambda m, err=err: [err])
        assert r.verdict is Verdict.FAIL, (profile, r.checks)
        assert "expected MSG_OK; got MSG_ERROR" in failed(r)[0]


@pytest.mark.asyncio
async def test_degraded_and_should_levels():
    r = await embedded(case("""
- send: {type: MSG_SUBMIT, fields: {task_type: a, payload: b}}
  expect: {any_of: [{message: {type: MSG_TASK}}, {message: {type: MSG_OK}, degraded: true, level: SHOULD}]}
- send: {type: MSG_SUBMIT, fields: {task_type: a, payload: b}}
  expect: {message: {type: MSG_OK, fields: {task_id: {$lte: 0}}}, level: MAY}
"""))
    assert r.verdict is Verdict.NON_STRICT
    # a degraded match ends the case: what follows was written for the outcome asked first
    assert [c.level for c in r.failed_checks] == ["SHOULD"]
    r = await embedded(case("""
- send: {type: MSG_SUBMIT, fields: {task_type: a, payload: b}}
  expect: {message: {type: MSG_OK, fields: {task_id: {$lte: 0}}}, level: MAY}
"""))
    assert r.verdict is Verdict.NON_STRICT
    assert [c.level for c in r.failed_checks] == ["MAY"]


async def logic_quicx(ctx: CaseContext) -> None:
    producer = await ctx.connect()
    ok = await producer.request("MSG_SUBMIT", task_type="t", payload=b"x")
    ctx.check(ok is not None and ok.name == "MSG_OK", "submit answered", actual=ok and ok.name)
    worker = await ctx.connect(role="worker")
    task = await worker.request({"type": "MSG_READY"})
    ctx.check(task.fields["task_id"] == ok.fields["task_id"], "the worker gets the task")
    await worker.send("MSG_DONE", task_id=task.fields["task_id"])
    await worker.send_raw("01")  # half a header, then close
    await worker.close()


@pytest.mark.asyncio
async def test_python_quicx_case():
    text = """
    cases:
      - id: t.qx.logic
        title: logic
        requirements: [QX-MSG-1]
        logic: test_steps_quicx:logic_quicx
    """
    run = await runner.run_target("quicx", "embedded", cases=load_text(
        textwrap.dedent(text), "t.yaml", "quicx", "quicx/v1"))
    r = one(run)
    assert r.verdict is Verdict.PASS, failed(r) or r.error
    assert [e.conn for e in r.transcript.events if e.direction == "open"] == [1, 2]
    assert run.server_info is None and run.profile == "quicx/v1"
    cov = run.coverage
    spec = load_profile("quicx/v1")
    roles = set(spec.model.peer_roles)
    assert all(spec.requirements[x].subject not in roles for x in cov.applicable)
    assert cov.exercised == ("QX-MSG-1",)  # a peer requirement: in scope


@pytest.mark.parametrize("step, message", [
    ("- {send: {type: MSG_NOPE}}", "send: type 'MSG_NOPE' is not a message of quicx/v1"),
    ("- {send: {type: MSG_OK}, expect: {error: NOPE}}", "error: 'NOPE' is not an error code"),
    ("- {send: {type: MSG_OK}, expect: {ok: {}}}", "unknown outcome key 'ok'"),
    ("- {send: {type: MSG_OK}, role: boss}", "role: 'boss' is not one of"),
    ("- {pipeline: {count: 1, send: {}}}", "unknown key 'pipeline'"),
])
def test_quicx_loader_errors(step, message):
    text = ("cases:\n  - id: x\n    title: t\n    requirements: [QX-MSG-1]\n    steps:\n"
            + textwrap.indent(step, "      "))
    with pytest.raises(CaseError, match=message.replace("(", r"\(").replace("[", r"\[")):
        load_text(text, "q.yaml", "quicx", "quicx/v1")


@pytest.mark.asyncio
async def test_quicx_info_and_error_verdicts():
    r = await embedded(case("""
- send: {type: MSG_SUBMIT, fields: {task_type: a, payload: b}}
  expect: {message: {type: MSG_OK}}
""", extra="    info: true\n"))
    assert r.verdict is Verdict.INFO
    r = await embedded(case("""
- send: {type: MSG_SUBMIT, fields: {payload: b}}
  expect: {message: {type: MSG_OK}}
"""))
    assert r.verdict is Verdict.ERROR
    assert r.error.startswith("step 1: cannot encode MSG_SUBMIT:") and "task_type" in r.error


def test_unimplemented_only_where_the_unknown_type_code_says_only_that():
    """quicx/v1 answers an unknown type and every invalid frame with INVALID_MESSAGE, and in
    quicx/1.0.3 0x04 is also an unknown task type: neither code can tell an unhandled message
    from a refusal (issue 30). A profile whose unknown-type code is its own can."""
    import dataclasses

    from queuewire.conformance.steps_quicx import unimplemented_code
    for name in ("quicx/v1", "quicx/1.0.3"):
        assert unimplemented_code(load_profile(name).model) is None
    spec = load_profile("quicx/v1").model
    own = max(spec.error_names) + 1
    replies = {k: (own if k == "unknown_type" else v) for k, v in spec.error_replies.items()}
    unique = dataclasses.replace(spec, error_replies=replies, error_names={
        **spec.error_names, own: "UNKNOWN_TYPE_ONLY"}, error_codes={**spec.error_codes})
    object.__setattr__(unique, "error_code", lambda name: own if name == "INVALID_MESSAGE"
                       else spec.error_code(name))
    assert unimplemented_code(unique) == own
