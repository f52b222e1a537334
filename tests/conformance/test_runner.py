"""The conformance runner end to end: loading, selection, verdicts, coverage, reproduction.

Cases are written here as YAML strings (the real suite is tested elsewhere) and run over real
TCP against the embedded reference servers and against small misbehaving servers defined
below (never reply, close at once, refuse, echo a wrong reqId, not know the command). Each of
the six verdicts is produced and asserted. The fakes are imported by the step tests too.
"""

from __future__ import annotations

import asyncio
import socket
import textwrap
from collections.abc import Callable
from typing import Any

import pytest

from queuewire.codecs.bunqueue import FrameDecoder, encode_frame
from queuewire.codecs.errors import ProtocolError
from queuewire.conformance import runner
from queuewire.conformance.context import CaseContext
from queuewire.conformance.loader import CaseError, load_dir, load_text
from queuewire.conformance.model import Case, Verdict, run_failed
from queuewire.conformance.targets import embedded, parse_target
from queuewire.spec import load_profile
from queuewire.spec.instances import minimal

BQ = "bunqueue/v2"
BQ_SPEC = load_profile(BQ).model

# ---------------------------------------------------------------------------- fake servers

Behaviour = Callable[[dict], Any]  # request -> list of replies | "close" | None (no answer)


class FakeBunqueue:
    """A bunqueue server that answers each request with ``behave(request)``.

    ``behave`` returns a list of reply maps to write, ``"close"`` to close the connection,
    or None to stay silent. ``on_connect`` frames are written as soon as a client connects;
    ``close_at_once`` closes every connection on accept.
    """

    def __init__(self, behave: Behaviour = lambda m: None, *, on_connect: list[dict] = (),
                 close_at_once: bool = False):
        self.behave = behave
        self.on_connect = list(on_connect)
        self.close_at_once = close_at_once
        self.requests: list[dict] = []
        self._server: asyncio.AbstractServer | None = None
        self.port = 0

    async def __aenter__(self) -> FakeBunqueue:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.port = self._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            if self.close_at_once:
                return
            for f in self.on_connect:
                writer.write(encode_frame(f))
            dec = FrameDecoder(BQ)
            while data := await reader.read(65536):
                try:
                    msgs = dec.feed(data)
                except ProtocolError:  # a fake is silent about bad frames
                    dec = FrameDecoder(BQ)
                    continue
                for msg in msgs:
                    self.requests.append(msg)
                    out = self.behave(msg)
                    if out == "close":
                        return
                    for rep in out or ():
                        writer.write(encode_frame(rep))
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()


def refuse(msg: dict) -> list[dict]:
    return [{"ok": False, "error": "nope", "reqId": msg.get("reqId")}]


def wrong_reqid(msg: dict) -> list[dict]:
    return [{"ok": True, "id": "x", "reqId": "not-" + str(msg.get("reqId"))}]


def unknown(msg: dict) -> list[dict]:
    return [{"ok": False, "error": f"Unknown command: {msg.get('cmd')}", "reqId": msg.get("reqId")}]


def good(msg: dict) -> list[dict]:
    """A valid minimal success reply (built from the spec's response schema)."""
    rep = dict(minimal(BQ_SPEC.commands[msg["cmd"]].response))
    if "reqId" in msg:
        rep["reqId"] = msg["reqId"]
    return [rep]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cases_of(text: str, protocol: str = "bunqueue", profile: str | None = None) -> list[Case]:
    return load_text(textwrap.dedent(text), "test.yaml", protocol, profile)


async def run_on(text: str, target: str, protocol: str = "bunqueue", **kw: Any):
    profile = kw.pop("profile", None)
    return await runner.run_target(protocol, target, profile=profile,
                                   cases=cases_of(text, protocol, profile), **kw)


async def run_fake(text: str, fake: FakeBunqueue, **kw: Any):
    async with fake:
        return await run_on(text, fake.target, timeout=kw.pop("timeout", 0.5), **kw)


def one(run) -> Any:
    assert len(run.results) == 1, [r.case.id for r in run.results]
    return run.results[0]


PUSH_OK = """
cases:
  - id: t.push
    title: PUSH is accepted
    requirements: [BQ-CMD-PUSH]
    command: PUSH
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {n: 1}}
        expect: {ok: {id: {$type: str}}}
"""


# ---------------------------------------------------------------------------- verdicts

@pytest.mark.asyncio
async def test_pass_against_the_embedded_server():
    run = await run_on(PUSH_OK, "embedded")
    r = one(run)
    assert r.verdict is Verdict.PASS, r.checks
    assert r.error is None
    kinds = {c.kind for c in r.checks}
    assert {"reply", "schema"} <= kinds
    assert all(c.ok for c in r.checks)
    # the transcript has the open, the request, the reply and the tester's close
    dirs = [e.direction for e in r.transcript.events]
    assert dirs[0] == "open" and "send" in dirs and "recv" in dirs and dirs[-1] == "close"
    sent = [e.decoded for e in r.transcript.events if e.direction == "send"][0]
    assert sent["cmd"] == "PUSH" and sent["queue"].startswith("qw-t.push-")
    assert r.transcript.sent(1) == b"".join(e.data for e in r.transcript.events
                                             if e.direction == "send")
    assert not run_failed([run])


@pytest.mark.asyncio
async def test_fail_when_the_server_refuses():
    run = await run_fake(PUSH_OK, FakeBunqueue(refuse))
    r = one(run)
    assert r.verdict is Verdict.FAIL
    bad = r.failed_checks[0]
    assert bad.requirement == "BQ-CMD-PUSH" and bad.level == "MUST"
    assert "'nope'" in bad.message
    assert run_failed([run])


@pytest.mark.asyncio
async def test_fail_when_the_server_never_replies():
    run = await run_fake(PUSH_OK, FakeBunqueue(lambda m: None), timeout=0.3)
    r = one(run)
    assert r.verdict is Verdict.FAIL
    assert "no reply within" in r.failed_checks[0].message


@pytest.mark.asyncio
async def test_fail_when_the_server_closes_at_once():
    run = await run_fake(PUSH_OK, FakeBunqueue(close_at_once=True))
    r = one(run)
    assert r.verdict is Verdict.FAIL
    assert "closed" in r.failed_checks[0].message
    assert any(e.direction == "close" and "peer" in e.note for e in r.transcript.events)


@pytest.mark.asyncio
async def test_fail_when_the_reqid_is_wrong():
    run = await run_fake(PUSH_OK, FakeBunqueue(wrong_reqid), timeout=0.3)
    r = one(run)
    assert r.verdict is Verdict.FAIL
    msg = r.failed_checks[0].message
    assert "no reply within" in msg and "not-r" in msg  # says what arrived instead


@pytest.mark.asyncio
async def test_unimplemented_when_the_command_is_unknown():
    run = await run_fake(PUSH_OK, FakeBunqueue(unknown))
    r = one(run)
    assert r.verdict is Verdict.UNIMPLEMENTED
    assert any(c.kind == "unimplemented" for c in r.checks)
    assert not run_failed([run])
    assert run_failed([run], ) is False
    run.strict = True
    assert run_failed([run])


@pytest.mark.asyncio
async def test_unknown_command_is_a_failure_when_it_is_not_the_command_under_test():
    text = PUSH_OK.replace("    command: PUSH\n", "")
    r = one(await run_fake(text, FakeBunqueue(unknown)))
    assert r.verdict is Verdict.FAIL


@pytest.mark.asyncio
async def test_non_strict_when_only_a_should_fails():
    text = PUSH_OK.replace("expect: {ok: {id: {$type: str}}}",
                           "expect: {ok: {}, level: SHOULD}")
    run = await run_fake(text, FakeBunqueue(refuse))
    r = one(run)
    assert r.verdict is Verdict.NON_STRICT
    assert r.failed_checks[0].level == "SHOULD"
    assert not run_failed([run])
    run.strict = True
    assert run_failed([run])


@pytest.mark.asyncio
async def test_info_case():
    text = """
    cases:
      - id: t.info
        title: What Stats says
        requirements: [BQ-CMD-Stats]
        info: true
        steps:
          - send: {cmd: Stats}
            expect: {ok: {}}
    """
    r = one(await run_on(text, "embedded"))
    assert r.verdict is Verdict.INFO
    assert r.checks and all(c.ok for c in r.checks)


@pytest.mark.asyncio
async def test_error_when_the_target_is_unreachable():
    port = free_port()
    run = await run_on(PUSH_OK, f"127.0.0.1:{port}", timeout=0.5)
    r = one(run)
    assert r.verdict is Verdict.ERROR
    assert r.error.startswith(f"cannot connect to 127.0.0.1:{port}")
    assert run.server_info is None
    assert run.coverage.exercised == ()  # an ERROR exercises nothing
    assert run_failed([run])


@pytest.mark.asyncio
async def test_error_when_a_case_checks_nothing():
    text = """
    cases:
      - id: t.nothing
        title: sleeps only
        requirements: [BQ-CMD-PUSH]
        steps:
          - sleep: 1
    """
    r = one(await run_on(text, "embedded"))
    assert r.verdict is Verdict.ERROR and "checked nothing" in r.error


@pytest.mark.asyncio
async def test_error_when_token_is_missing():
    text = PUSH_OK.replace('queue: "${queue}"', 'queue: "${token}"')
    r = one(await run_on(text, "embedded"))
    assert r.verdict is Verdict.ERROR
    assert r.error == "step 1: the case uses ${token} but no --auth-token was given"


# ---------------------------------------------------------------------------- python cases

async def logic_pass(ctx: CaseContext) -> None:
    conn = await ctx.connect()
    reply = await conn.request({"cmd": "PUSH", "queue": ctx.var("queue"), "data": {"a": 1}})
    ctx.check(reply is not None and reply["ok"] is True, "PUSH accepted", actual=reply)
    pulled = await conn.request({"cmd": "PULL", "queue": ctx.var("queue"), "timeout": 0})
    ctx.check(pulled["job"]["id"] == reply["id"], "the same job comes back",
              expected=reply["id"], actual=pulled["job"]["id"])
    assert await conn.recv(timeout=0.05) is None  # nothing unsolicited


async def logic_raises(ctx: CaseContext) -> None:
    await ctx.connect()
    raise RuntimeError("boom")


async def logic_should(ctx: CaseContext) -> None:
    conn = await ctx.connect()
    reply = await conn.request({"cmd": "Stats"})
    ctx.check(False, "an observation that a SHOULD does not hold", level="SHOULD", actual=reply)


@pytest.mark.asyncio
async def test_python_cases():
    text = """
    cases:
      - id: t.logic.pass
        title: logic that passes
        requirements: [BQ-CMD-PULL]
        logic: test_runner:logic_pass
      - id: t.logic.raises
        title: logic that raises
        requirements: [BQ-CMD-PULL]
        logic: test_runner:logic_raises
      - id: t.logic.should
        title: logic with a SHOULD failure
        requirements: [BQ-CMD-PULL]
        logic: test_runner:logic_should
    """
    run = await run_on(text, "embedded")
    got = {r.case.id: r for r in run.results}
    assert got["t.logic.pass"].verdict is Verdict.PASS
    assert [c.requirement for c in got["t.logic.pass"].checks] == ["BQ-CMD-PULL"] * 2
    err = got["t.logic.raises"]
    assert err.verdict is Verdict.ERROR
    assert err.error.startswith("the logic function raised RuntimeError: boom (at test_runner.py:")
    assert got["t.logic.should"].verdict is Verdict.NON_STRICT
    # each case closed its connections
    for r in run.results:
        assert r.transcript.events[-1].direction == "close"


# ---------------------------------------------------------------------------- runner features

MANY = """
cases:
  - id: t.a.one
    title: one
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: 1}
        expect: {ok: {}}
  - id: t.a.two
    title: two
    requirements: [BQ-CMD-Stats]
    steps:
      - send: {cmd: Stats}
        expect: {ok: {}}
  - id: t.b.three
    title: three
    requirements: [BQ-HELLO-1]
    steps:
      - send: {cmd: Hello, protocolVersion: 2}
        expect: {ok: {}}
"""


@pytest.mark.asyncio
async def test_select_skip_known_failing_progress_and_coverage():
    seen: list[tuple[str, Any]] = []
    run = await run_on(MANY, "embedded", select=["t.a.*", "t.b.three"], skip=["*.two"],
                       known_failing=["t.a.one"],
                       progress=lambda kind, value: seen.append((kind, value)))
    assert [r.case.id for r in run.results] == ["t.a.one", "t.b.three"]
    # the server's residue is reported once, after the last case and before "done"
    assert [k for k, _ in seen] == ["start", "case", "case", "residue", "done"]
    assert seen[0][1] == 2 and seen[-1][1] is run and seen[-2][1] is run.residue
    first = run.results[0]
    assert first.known_failing and first.verdict is Verdict.PASS
    assert run.failing() == [first]  # a known failure that passes makes the list stale
    assert run_failed([run])
    # reproduction lines name the target and the case
    assert first.reproduction == ("queuewire conform server --protocol bunqueue --target embedded"
                                  " --profile bunqueue/v2 --select 't.a.one'")
    # server info: the Hello reply
    assert run.server_info["ok"] is True and run.server_info["protocolVersion"] == 2
    # coverage: client requirements are out of scope even when a case cites one
    prof = load_profile(BQ)
    cov = run.coverage
    assert set(cov.applicable) | set(cov.out_of_scope) == set(prof.requirements)
    assert all(prof.requirements[r].subject != "client" for r in cov.applicable)
    assert all(prof.requirements[r].subject == "client" for r in cov.out_of_scope)
    assert cov.exercised == ("BQ-CMD-PUSH",)  # BQ-HELLO-1 binds clients
    assert "BQ-HELLO-1" in cov.out_of_scope
    assert 0 < cov.ratio < 1
    assert run.target == "embedded" and run.profile == BQ and run.started_at.endswith("+00:00")


def test_reproduction_for_an_address_with_options():
    case = cases_of(PUSH_OK)[0]
    line = runner.reproduction(case, "bunqueue", "10.0.0.1:6789", BQ, auth_token="secret",
                               strict=True, timeout=2)
    assert line == ("queuewire conform server --protocol bunqueue --target 10.0.0.1:6789"
                    " --profile bunqueue/v2 --auth-token \"$QUEUEWIRE_AUTH_TOKEN\" --strict"
                    " --timeout 2 --select 't.push'")
    assert "secret" not in line


@pytest.mark.asyncio
async def test_auth_token_is_sent_on_every_connection():
    text = """
    cases:
      - id: t.auth
        title: with a token
        requirements: [BQ-CMD-PUSH]
        steps:
          - send: {cmd: PUSH, queue: "${queue}", data: 1}
            expect: {ok: {}}
          - conn: 2
            auth: false
            send: {cmd: PUSH, queue: "${queue}", data: 1}
            expect: {error: not_authenticated}
    """
    run = await run_on(text, "embedded", auth_token="tok")
    r = one(run)
    assert r.verdict is Verdict.PASS, [c.message for c in r.failed_checks] or r.error
    sent = [(e.conn, e.decoded["cmd"]) for e in r.transcript.events if e.direction == "send"]
    assert sent == [(1, "Auth"), (1, "PUSH"), (2, "PUSH")]
    assert run.server_info is not None  # Hello after Auth
    # a wrong token is an ERROR naming the refusal
    async def wrong():
        async with embedded("bunqueue", BQ, auth_tokens=("right",)) as (host, port):
            return await runner.run_target("bunqueue", f"{host}:{port}", auth_token="wrong",
                                           cases=cases_of(PUSH_OK))
    r = one(await wrong())
    assert r.verdict is Verdict.ERROR and "Auth with --auth-token was refused" in r.error


@pytest.mark.asyncio
async def test_case_wall_clock_limit():
    text = """
    cases:
      - id: t.slow
        title: sleeps beyond its limit
        requirements: [BQ-CMD-PUSH]
        steps:
          - sleep: 2000
    """
    r = one(await run_on(text, "embedded", timeout=0.1))
    assert r.verdict is Verdict.ERROR and "did not finish within" in r.error


def test_parse_target():
    assert parse_target("embedded") == "embedded"
    assert parse_target("127.0.0.1:6789") == ("127.0.0.1", 6789)
    assert parse_target("[::1]:1") == ("::1", 1)
    for bad in ("", "host", "host:0", "host:99999", ":80", "host:x"):
        with pytest.raises(ValueError, match="not HOST:PORT"):
            parse_target(bad)


def test_run_target_sync_and_profile_mismatch():
    run = runner.run_target_sync("bunqueue", "embedded", cases=cases_of(PUSH_OK))
    assert one(run).verdict is Verdict.PASS
    with pytest.raises(ValueError, match="is for quicx"):
        runner.run_target_sync("bunqueue", "embedded", profile="quicx/v1", cases=[])


# ---------------------------------------------------------------------------- loader

def test_load_dir_reads_yaml_files_and_filters_profiles(tmp_path):
    (tmp_path / "a.yaml").write_text(textwrap.dedent(PUSH_OK))
    (tmp_path / "b.yaml").write_text(textwrap.dedent("""
    cases:
      - id: t.only-295
        title: for another profile
        requirements: [BQ-CMD-PUSH]
        profiles: [bunqueue/2.9.5]
        steps:
          - send: {cmd: Stats}
            expect: {ok: {}}
      - generate: test_runner:generated
    """))
    (tmp_path / "notes.txt").write_text("ignored")
    cases = load_dir(tmp_path, "bunqueue", BQ)
    assert [c.id for c in cases] == ["t.push", "t.gen.0", "t.gen.1"]
    assert cases[0].source == "cases/bunqueue/a.yaml #0"
    assert cases[1].params == {"n": 0}
    assert [c.id for c in load_dir(tmp_path, "bunqueue", "bunqueue/2.9.5")][:2] == \
        ["t.push", "t.only-295"]


def generated(profile):
    assert profile.protocol == "bunqueue"  # the loaded Profile
    for n in range(2):
        yield Case(f"t.gen.{n}", f"generated {n}", "bunqueue", ("BQ-CMD-Stats",),
                   steps=({"send": {"cmd": "Stats"}, "expect": {"ok": {}}},), params={"n": n})


def bad_generator(profile):
    yield Case("t.gen.bad", "bad", "bunqueue", ("BQ-NOPE-1",), steps=({"sleep": 1},))


@pytest.mark.parametrize("body, message", [
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH], stepz: []}",
     "test.yaml #0 case x: unknown key 'stepz'"),
    ("- {id: x, title: t, requirements: [BQ-NOPE-9], steps: [{sleep: 1}]}",
     "test.yaml #0 case x: requirement 'BQ-NOPE-9' is in no bunqueue profile"),
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH], steps: [{send: {cmd: PUSH}, sned: 1}]}",
     "test.yaml #0 case x step 1: unknown key 'sned'"),
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH], steps: [{send: {}, expect: {error: nope}}]}",
     "test.yaml #0 case x step 1: error: 'nope' is not an error"),
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH], steps: [{send: {}, expect: {ok: {}, lvl: 1}}]}",
     "test.yaml #0 case x step 1: unknown outcome key 'lvl'"),
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH], steps: [{send: {q: '${nope}'}}]}",
     "test.yaml #0 case x: unknown variable ${nope}"),
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH], steps: [{send: {}, sleep: 1}]}",
     "test.yaml #0 case x step 1: a step has exactly one action"),
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH], logic: 'no_such_module_qw:f'}",
     "test.yaml #0 case x: logic: cannot import no_such_module_qw"),
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH], logic: 'test_runner:generated'}",
     "test.yaml #0 case x: logic: test_runner:generated must be an async def"),
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH]}",
     "test.yaml #0 case x: a case has either steps: or logic:"),
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH], steps: [{sleep: 1}]}\n"
     "- {id: x, title: u, requirements: [BQ-CMD-PUSH], steps: [{sleep: 1}]}",
     "test.yaml #1: case id x is already used by test.yaml #0"),
    ("- generate: test_runner:bad_generator",
     "case t.gen.bad: requirement 'BQ-NOPE-1' is in no bunqueue profile"),
    ("- {id: x, title: t, requirements: [BQ-CMD-PUSH], steps: [{recv: true}]}",
     "test.yaml #0 case x step 1: recv: needs an expect:"),
])
def test_loader_errors_name_file_case_and_key(body, message):
    text = "cases:\n" + textwrap.indent(body, "  ")
    with pytest.raises(CaseError) as info:
        load_text(text, "test.yaml", "bunqueue", BQ)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_loader_rejects_bad_yaml_and_top_level():
    with pytest.raises(CaseError, match="test.yaml line 1: not valid YAML"):
        load_text("cases: [", "test.yaml", "bunqueue", BQ)
    with pytest.raises(CaseError, match="a case file is a map with one key"):
        load_text("tests: []", "test.yaml", "bunqueue", BQ)


def test_packaged_cases_are_found():
    # the packaged directory exists (other helpers fill it); loading it must not crash on ours
    d = __import__("queuewire.conformance.loader", fromlist=["package_dir"]).package_dir("bunqueue")
    assert d.name == "bunqueue"


@pytest.mark.asyncio
async def test_jobs_keep_order_and_separate_transcripts():
    seen: list[str] = []
    run = await run_on(MANY, "embedded", jobs=3,
                       progress=lambda k, v: seen.append(k))
    assert [r.case.id for r in run.results] == ["t.a.one", "t.a.two", "t.b.three"]
    assert all(r.verdict is Verdict.PASS for r in run.results)
    for r in run.results:
        cmds = [e.decoded["cmd"] for e in r.transcript.events if e.direction == "send"]
        assert len(cmds) == 1  # only this case's request
    assert seen.count("case") == 3
