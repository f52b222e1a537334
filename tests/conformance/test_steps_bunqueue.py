"""Every bunqueue step kind and outcome of the case language, over real TCP.

Against the embedded reference server for what it does right (framing errors, pipelining,
split frames, error strings), and against the small fake servers of ``test_runner`` for what
only a misbehaving server shows (push frames, schema and missing/extra fields, degraded
outcomes, a reply without reqId).
"""

from __future__ import annotations

import asyncio

import pytest
from test_runner import FakeBunqueue, good, one, run_fake, run_on

from queuewire.conformance.model import Verdict
from queuewire.spec import load_profile

BQ = load_profile("bunqueue/v2")
MAX_FRAME = BQ.model.max_frame_bytes

pytestmark = pytest.mark.asyncio


def case(steps: str, requirements: str = "[BQ-CMD-PUSH]", extra: str = "") -> str:
    return ("cases:\n  - id: t.case\n    title: a case\n"
            f"    requirements: {requirements}\n{extra}    steps:\n" +
            "".join(f"      {line}\n" for line in steps.strip("\n").splitlines()))


async def embedded(text: str, **kw):
    return one(await run_on(text, "embedded", **kw))


def failed(r) -> list[str]:
    return [c.message for c in r.failed_checks]


async def test_send_save_variables_and_subset_operators():
    r = await embedded(case("""
- send: {cmd: PUSHB, queue: "${queue}", jobs: [{data: {n: 1}, priority: 3}, {data: {n: 2}}]}
  expect: {ok: {ids: [{$type: str}, {$any: true}]}}
  save: {first: ids.0, second: ids.-1}
- send: {cmd: PULL, queue: "${queue}", timeout: 0}
  expect: {ok: {job: {id: "${first}", priority: {$gte: 3, $lte: 3}, data: {n: 1}, nope: {$absent: true}}}}
- send: {cmd: GetJob, id: "${second}"}
  expect: {ok: {job: {id: "${second}", attempts: {$type: [int, float]}}}}
- send: {cmd: PUSH, queue: "${queue2}", data: "${profile}", jobId: "${uuid}"}
  expect: {ok: {}}
"""))
    assert r.verdict is Verdict.PASS, failed(r) or r.error
    sent = [e.decoded for e in r.transcript.events if e.direction == "send"]
    assert sent[1]["queue"] == sent[0]["queue"] and sent[3]["queue"].endswith("-2")
    assert sent[3]["data"] == "bunqueue/v2"


async def test_subset_mismatch_is_explained():
    r = await embedded(case("""
- send: {cmd: PUSH, queue: "${queue}", data: 1}
  expect: {ok: {id: {$type: int}}}
"""))
    assert r.verdict is Verdict.FAIL
    assert "id is '" in failed(r)[0] and "not of type int" in failed(r)[0]


async def test_error_outcomes_by_name_regex_and_any():
    r = await embedded(case("""
- send: {cmd: ACK, id: "${uuid}"}
  expect: {error: job_not_processing}
- send: {cmd: ACK, id: "${uuid}"}
  expect: {error: {matches: "^Job not found"}}
- send: {cmd: NOPE}
  expect: {error: unknown_command}
- send: {cmd: NOPE}
  expect: {error: true}
""", "[BQ-CMD-ACK]", "    command: ACK\n"))
    assert r.verdict is Verdict.PASS, failed(r) or r.error
    # the wrong error string is a failure naming both
    r = await embedded(case("""
- send: {cmd: ACK, id: "${uuid}"}
  expect: {error: job_not_found}
""", "[BQ-CMD-ACK]"))
    assert r.verdict is Verdict.FAIL
    assert "the error reply job_not_found" in failed(r)[0]
    assert "Job not found or not in processing state" in failed(r)[0]


async def test_send_raw_forms_none_and_close():
    r = await embedded(case(f"""
- send_raw: {{frame: {{cmd: Stats, reqId: a}}, truncate: 6}}
  expect: {{none: 150}}
- conn: 2
  send_raw: "00 00 00 01 c1"
  expect: {{error: invalid_command_format}}
- conn: 2
  send_raw: {{frame: {{cmd: Stats, reqId: b}}}}
  expect: {{ok: {{reqId: b}}}}
- conn: 3
  send_raw: {{length_prefix: {MAX_FRAME + 1}, body_bytes: 0}}
  expect:
    any_of:
      - {{close: {{after_error: frame_too_large}}}}
      - {{close: true, degraded: true, level: SHOULD}}
- conn: 4
  send_raw: {{hex: "00", repeat: 3}}
  expect: {{none: 100}}
""", "[BQ-FRAME-2]"))
    assert r.verdict is Verdict.PASS, failed(r) or r.error
    notes = [e.note for e in r.transcript.events if e.direction == "send"]
    assert notes[0] == "the first 6 of 13 bytes of a frame" or notes[0].startswith("the first 6 of")
    assert any("closed by the peer" in e.note for e in r.transcript.events if e.conn == 3)


async def test_declared_length_lie_and_step_timeout():
    # the prefix claims more than is sent: the server waits for the rest
    r = await embedded(case("""
- send_raw: {frame: {cmd: Stats, reqId: a}, declared_length: 200}
  timeout: 0.2
  expect: {any_of: [{error: true}, {close: true}]}
""", "[BQ-FRAME-1]"))
    assert r.verdict is Verdict.FAIL
    assert "no reply within 0.2" in failed(r)[0] or "stayed open" in failed(r)[0]


async def test_send_frames_split_and_pipeline():
    r = await embedded(case("""
- send_frames: [{cmd: PUSH, queue: "${queue}", data: 1}, {cmd: PUSH, queue: "${queue}", data: 2}]
  split: 1
  expect: {ok: {id: {$type: str}}}
- pipeline: {count: 300, send: {cmd: PUSH, queue: "${queue}", data: {i: "${i}"}}}
  expect: {ok: {}}
- send: {cmd: Count, queue: "${queue}"}
  expect: {ok: {count: 302}}
""", "[BQ-PIPE-1]"))
    assert r.verdict is Verdict.PASS, failed(r) or r.error
    reqid = [c for c in r.checks if c.kind == "reqid"]
    assert reqid[1].message == "300 of 300 requests answered once by reqId"
    assert reqid[1].requirement == "BQ-PIPE-1"
    sends = [e for e in r.transcript.events if e.direction == "send"]
    assert len(sends) == 2 + 300 + 1
    assert sends[0].note == "written in 1-byte pieces"
    assert [e.decoded["data"]["i"] for e in sends[2:5]] == [0, 1, 2]


async def test_pipeline_with_missing_and_duplicate_replies():
    def twice_or_never(msg):
        n = int(str(msg.get("reqId"))[1:])
        if n % 3 == 0:
            return None
        rep = {"ok": True, "id": "x", "reqId": msg["reqId"]}
        return [rep, rep] if n % 3 == 1 else [rep]
    text = case("""
- pipeline: {count: 6, send: {cmd: PUSH, queue: "${queue}", data: 1}}
  expect: {ok: {}}
""", "[BQ-PIPE-1]")
    r = one(await run_fake(text, FakeBunqueue(twice_or_never), timeout=0.3))
    assert r.verdict is Verdict.FAIL
    msg = [c for c in r.checks if c.kind == "reqid"][0].message
    assert msg.startswith("4 of 6 requests answered once by reqId; no reply for r3, r6")
    assert "answered twice: r1, r4" in msg


async def test_recv_push_frames_sleep_close_and_connections():
    fake = FakeBunqueue(good, on_connect=[{"event": "hello", "n": 1}])
    text = case("""
- send: {cmd: Stats}
  expect: {ok: {}}
- recv:
  expect: {frame: {event: hello}}
- recv:
  timeout: 0.1
  expect: {none: 100}
- sleep: 10
- close: true
- conn: 2
  recv:
  expect: {frame: {event: hello}}
- conn: 2
  send: {cmd: Stats}
  reqid: false
  expect: {ok: {}}
- conn: 2
  send: {cmd: Stats}
  wait: false
- conn: 2
  send: {cmd: Stats}
  expect: {ok: {}}
""", "[BQ-CMD-Stats]")
    r = one(await run_fake(text, fake))
    assert r.verdict is Verdict.PASS, failed(r) or r.error
    closes = [e for e in r.transcript.events if e.direction == "close"]
    assert closes[0].conn == 1 and closes[0].note == "closed by the tester"
    sent = [e.decoded for e in r.transcript.events if e.direction == "send" and e.conn == 2]
    assert "reqId" not in sent[0] and "reqId" in sent[1]


async def test_send_on_a_connection_the_server_closed_is_an_error():
    text = case("""
- send: {cmd: Stats}
  expect: {close: true}
- send: {cmd: Stats}
  expect: {ok: {}}
""", "[BQ-CMD-Stats]")
    r = one(await run_fake(text, FakeBunqueue(lambda m: "close")))
    assert r.verdict is Verdict.ERROR
    assert r.error.startswith("step 2: connection 1 was closed by the server")


async def test_schema_missing_and_extra_fields():
    def bad_push(msg):
        if msg.get("cmd") == "PUSH":
            return [{"ok": True, "reqId": msg["reqId"], "surprise": 1}]
        return [{"ok": True, "id": 7, "reqId": msg["reqId"]}]
    text = case("""
- send: {cmd: PUSH, queue: "${queue}", data: 1}
  expect: {ok: {}, level: SHOULD}
""")
    r = one(await run_fake(text, FakeBunqueue(bad_push)))
    kinds = {c.kind: c for c in r.checks}
    assert kinds["missing-field"].ok is False and kinds["missing-field"].requirement == "BQ-CMD-PUSH"
    assert "lacks the required field id" in kinds["missing-field"].message
    assert kinds["extra-field"].ok is True and kinds["extra-field"].actual == ["surprise"]
    assert "schema" not in kinds  # the missing field is reported once, as missing-field
    assert r.verdict is Verdict.FAIL  # BQ-CMD-PUSH is a MUST
    # a wrong type is a schema violation citing the spec's requirement
    text = case("""
- send: {cmd: GetJob, id: x}
  expect: {ok: {}}
""", "[BQ-CMD-GetJob]")
    r = one(await run_fake(text, FakeBunqueue(bad_push)))
    assert r.verdict is Verdict.FAIL
    assert any(c.kind in ("schema", "missing-field") and not c.ok for c in r.checks)


async def test_degraded_outcome_is_non_strict():
    text = case("""
- send: {cmd: PUSH, queue: "${queue}", data: 1}
  expect:
    any_of:
      - {error: invalid_request}
      - {close: true, degraded: true, level: SHOULD, requirement: BQ-FRAME-2}
""")
    r = one(await run_fake(text, FakeBunqueue(lambda m: "close")))
    assert r.verdict is Verdict.NON_STRICT
    bad = r.failed_checks[0]
    assert bad.requirement == "BQ-FRAME-2" and bad.level == "SHOULD"
    assert "accepted, but not what the requirement asks first" in bad.message


async def test_any_of_miss_fails_at_the_strongest_level_and_continues_after_should():
    text = case("""
- send: {cmd: Stats}
  expect: {any_of: [{error: true, level: MAY}, {close: true, level: SHOULD}]}
  timeout: 0.2
- send: {cmd: Stats}
  expect: {ok: {}}
""", "[BQ-CMD-Stats]")
    r = one(await run_fake(text, FakeBunqueue(good)))
    assert r.verdict is Verdict.NON_STRICT
    assert [c.step for c in r.checks if c.kind == "reply"] == [1, 2]  # went on after a SHOULD
    assert r.failed_checks[0].level == "SHOULD"
    # a MUST failure stops the case
    text = case("""
- send: {cmd: Stats}
  expect: {error: true}
- send: {cmd: Stats}
  expect: {ok: {}}
""", "[BQ-CMD-Stats]")
    r = one(await run_fake(text, FakeBunqueue(good)))
    assert r.verdict is Verdict.FAIL
    assert {c.step for c in r.checks} == {1}


async def test_implicit_setup_check_and_failed_save():
    text = case("""
- send: {cmd: PUSH, queue: "${queue}", data: 1}
  save: {job: id}
- send: {cmd: GetJob, id: "${job}"}
  expect: {ok: {}}
""")
    r = one(await run_fake(text, FakeBunqueue(lambda m: [{"ok": True, "reqId": m["reqId"]}])))
    assert r.verdict is Verdict.FAIL
    kinds = [c.kind for c in r.checks]
    assert "setup" in kinds and kinds[-1] == "save"
    assert r.failed_checks[-1].message == "step 1: the reply has no id to save as job"
    r = one(await run_fake(text, FakeBunqueue(lambda m: [{"ok": False, "error": "no",
                                                          "reqId": m["reqId"]}])))
    setup = [c for c in r.checks if c.kind == "setup"][0]
    assert r.verdict is Verdict.FAIL and not setup.ok and "'no'" in setup.message


async def test_garbage_from_the_server_is_recorded():
    class Garbage(FakeBunqueue):
        async def _serve(self, reader, writer):
            await reader.read(100)
            writer.write(b"\x00\x00\x00\x01\xc1")  # a frame that is not MessagePack
            await writer.drain()
            await asyncio.sleep(0.5)
            writer.close()
    text = case("""
- send: {cmd: Stats}
  expect: {ok: {}}
  timeout: 0.3
""", "[BQ-CMD-Stats]")
    r = one(await run_fake(text, Garbage()))
    assert r.verdict is Verdict.FAIL
    assert "undecodable" in failed(r)[0]
    notes = [e for e in r.transcript.events if e.direction == "note"]
    assert notes and notes[0].note.startswith("decode error:")


async def test_large_sends_are_recorded_by_their_first_bytes(monkeypatch):
    from queuewire.conformance import wire
    monkeypatch.setattr(wire, "RECORD_LIMIT", 1 << 16)  # the real one is 16 MiB
    RECORD_LIMIT = wire.RECORD_LIMIT
    text = case(f"""
- send_raw: {{hex: "00", repeat: {RECORD_LIMIT * 3}}}
  expect: {{none: 50}}
""", "[BQ-FRAME-1]")
    r = one(await run_fake(text, FakeBunqueue()))
    assert r.verdict is Verdict.PASS, failed(r) or r.error
    sent = [e for e in r.transcript.events if e.direction == "send"][0]
    assert len(sent.data) == RECORD_LIMIT
    assert f"{RECORD_LIMIT * 3} bytes sent" in sent.note
    assert f"the other {RECORD_LIMIT * 2} are zero bytes" in sent.note


async def logic_helpers(ctx):
    from queuewire.conformance.context import StepError
    assert ctx.new_queue() != ctx.new_queue() and ctx.new_queue().startswith(ctx.var("queue"))
    conn = await ctx.connect()
    rid = await conn.send({"cmd": "Stats"})
    frame = await conn.wait_reply(rid, ctx.deadline())
    ctx.check(frame is not None and frame.value["ok"] is True, "Stats answered")
    await conn.send_raw("00 00 00 05 c1")  # declares 5 bytes, sends 1: the server waits
    ctx.check(not await conn.wait_closed(timeout=0.1), "a partial frame is buffered")
    await conn.close()
    try:
        await conn.send_raw("00")
    except StepError as exc:
        ctx.check("closed by the tester" in str(exc), "no send after close")


async def test_python_case_helpers():
    text = """
cases:
  - id: t.helpers
    title: ctx helpers
    requirements: [BQ-CMD-Stats]
    logic: test_steps_bunqueue:logic_helpers
"""
    r = await embedded(text)
    assert r.verdict is Verdict.PASS, failed(r) or r.error
    assert len(r.checks) == 3
