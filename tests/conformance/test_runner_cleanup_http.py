"""Cleanup steps, HTTP steps, observed-only coverage and transcript caps, over real TCP/HTTP.

Cleanup: it runs after a MUST failure, an ERROR and a pass alike, is recorded, and never
changes a verdict or adds a check. HTTP: ``http:`` steps against the embedded reference
server's HTTP API, against a tiny deliberately broken aiohttp server (each endpoint wrong in
one way, so the matching packaged ``bunqueue.http.*`` cases fail and ``bunqueue.http.api``
still passes), and without an HTTP target (INFO, "no --http-target"). Coverage: a requirement
cited only by INFO cases is *observed*, not exercised. Caps: decoded views are shortened,
bytes are kept for replay, and a send kept in part replays exactly only when its rest was zero.
"""

from __future__ import annotations

import json

import pytest
from aiohttp import web
from test_runner import cases_of, one, run_on

from queuewire.conformance import runner, wire
from queuewire.conformance.loader import CaseError
from queuewire.conformance.model import Case, CaseResult, Transcript, Verdict
from queuewire.conformance.replay import load_case_file, replay
from queuewire.conformance.report import case_document
from queuewire.reference_server.bunqueue import BunqueueServer
from queuewire.spec import load_profile

BQ = "bunqueue/v2"


def case(body: str) -> str:
    return "cases:\n" + body


def notes(r: CaseResult) -> list[str]:
    return [e.note for e in r.transcript.events if e.direction == "note"]


def sent_cmds(r: CaseResult) -> list[str]:
    return [e.decoded.get("cmd") for e in r.transcript.events
            if e.direction == "send" and isinstance(e.decoded, dict)]


# ---------------------------------------------------------------------------- cleanup

CLEANUP_AFTER_MUST = case("""
  - id: t.cleanup.after-must
    title: a MUST failure stops the steps, cleanup still runs
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {n: 1}}
        save: {job: id}
      - send: {cmd: Count, queue: "${queue}"}
        expect: {ok: {count: 99}}
      - send: {cmd: PUSH, queue: "${queue}", data: {n: 2}}
        save: {never: id}
    cleanup:
      - send: {cmd: GetJob, id: "${never}"}
      - send: {cmd: Count, queue: "${queue}"}
        expect: {ok: {count: 12345}}
      - send: {cmd: NoSuchCommand}
      - close: true
      - send: {cmd: Obliterate, queue: "${queue}"}
      - send: {cmd: Count, queue: "${queue}"}
        expect: {ok: {count: 0}}
""")


@pytest.mark.asyncio
async def test_cleanup_runs_after_a_must_failure_and_never_changes_the_verdict():
    r = one(await run_on(CLEANUP_AFTER_MUST, "embedded"))
    assert r.verdict is Verdict.FAIL
    # the checks are the steps' only: none from the cleanup (its steps are 4..9)
    assert r.checks and all(c.step in (1, 2) for c in r.checks)
    assert [c.ok for c in r.checks if c.kind in ("setup", "reply")] == [True, False]
    # the third step never ran; every cleanup step did (Obliterate after a close, reopened)
    assert sent_cmds(r) == ["PUSH", "Count", "Count", "NoSuchCommand", "Obliterate", "Count"]
    text = "\n".join(notes(r))
    assert "cleanup (not judged): step 4 could not run: variable ${never} is not set" in text
    assert "cleanup (not judged): step 5: expected an ok reply containing {'count': 12345}" in text
    assert "cleanup (not judged): step 6" in text  # the unknown command was refused
    opens = [e for e in r.transcript.events if e.direction == "open"]
    assert [e.conn for e in opens] == [1, 1]  # conn 1 opened again for the cleanup
    # and nothing of the cleanup was judged, even what matched
    assert not any("step 9" in c.message for c in r.checks)


@pytest.mark.asyncio
async def test_cleanup_failing_on_a_passing_case_and_after_an_error():
    text = case("""
  - id: t.cleanup.pass
    title: a passing case whose cleanup fails stays PASS
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {n: 1}}
        expect: {ok: {}}
    cleanup:
      - send: {cmd: PUSH, queue: 7}
      - send: {cmd: Obliterate, queue: "${queue}"}
        wait: false
  - id: t.cleanup.error
    title: a step that errors (no token) still gets its cleanup
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {n: 1}}
      - send: {cmd: Auth, token: "${token}"}
    cleanup:
      - send: {cmd: Obliterate, queue: "${queue}"}
""")
    run = await run_on(text, "embedded")
    ok, err = run.results
    assert ok.verdict is Verdict.PASS and all(c.ok for c in ok.checks)
    assert sent_cmds(ok) == ["PUSH", "PUSH", "Obliterate"]
    assert any(n.startswith("cleanup (not judged): step 2:") for n in notes(ok))
    assert err.verdict is Verdict.ERROR and "no --auth-token" in err.error
    assert err.error.startswith("step 2:")  # the error names the step, not the cleanup
    assert sent_cmds(err) == ["PUSH", "Obliterate"]


def test_cleanup_is_validated_by_the_loader():
    base = """
  - id: t.c
    title: t
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: Ping}
"""
    with pytest.raises(CaseError, match=r"t\.c: cleanup: takes a list of steps"):
        cases_of(case(base + "    cleanup: {send: {cmd: Ping}}\n"))
    with pytest.raises(CaseError, match=r"cleanup step 1: unknown key 'bogus'"):
        cases_of(case(base + "    cleanup:\n      - send: {cmd: Ping}\n        bogus: 1\n"))
    with pytest.raises(CaseError, match=r"unknown variable \$\{nope\}"):
        cases_of(case(base + '    cleanup:\n      - send: {cmd: GetJob, id: "${nope}"}\n'))
    loaded = cases_of(case(base + "    cleanup:\n      - send: {cmd: Ping}\n"))[0]
    assert loaded.cleanup == ({"send": {"cmd": "Ping"}},)


def test_packaged_cases_clean_up_in_cleanup_not_in_steps():
    for c in runner.load_cases("bunqueue", BQ):
        for step in c.steps:
            assert not (isinstance(step, dict) and step.get("wait") is False
                        and step is c.steps[-1]), f"{c.id}: a trailing wait: false step"
    shaped = [c for c in runner.load_cases("bunqueue", BQ) if c.id.startswith("bunqueue.shape.")]
    assert shaped and all(c.cleanup and c.cleanup[-1]["send"]["cmd"] == "Obliterate"
                          for c in shaped)


# ---------------------------------------------------------------------------- HTTP

HTTP_CASE = case("""
  - id: t.http
    title: http steps against the embedded HTTP API
    requirements: [BQ-HTTP-7]
    steps:
      - http: {method: POST, path: "/queues/${queue}/jobs", json: {data: {k: v}}}
        expect: {http: {status: [200, 201], json: {id: {$type: str}}}}
        save: {job: id}
      - http: {method: GET, path: "/jobs/${job}"}
        expect: {http: {status: 200, content_type: application/json, json: {job: {data: {k: v}}},
                        headers: {content-type: {$any: true}, x-not-there: {$absent: true}}}}
      - http: {method: GET, path: /prometheus}
        expect: {http: {text: "(?m)^# TYPE "}}
      - http: {method: GET, path: /no-such-endpoint}
        expect: {http: {status: 404}}
      - send: {cmd: GetJob, id: "${job}"}
        expect: {ok: {job: {queue: "${queue}"}}}
    cleanup:
      - send: {cmd: Obliterate, queue: "${queue}"}
""")


@pytest.mark.asyncio
async def test_http_steps_against_the_embedded_http_api():
    r = one(await run_on(HTTP_CASE, "embedded"))
    assert r.verdict is Verdict.PASS, [c.message for c in r.failed_checks] or r.error
    http = [e.decoded for e in r.transcript.events if e.conn == 0 and e.direction == "note"]
    assert [d["http"] for d in http] == ["request", "response"] * 4
    assert http[0]["method"] == "POST" and http[0]["json"] == {"data": {"k": "v"}}
    assert http[1]["status"] in (200, 201) and "id" in http[1]["json"]


@pytest.mark.asyncio
async def test_http_case_is_info_without_an_http_target():
    async def go():
        async with BunqueueServer(load_profile(BQ), "127.0.0.1", 0) as server:
            return await run_on(HTTP_CASE, f"127.0.0.1:{server.port}")
    r = one(await go())
    assert r.verdict is Verdict.INFO
    assert "no --http-target" in r.checks[0].message and r.checks[0].kind == "skipped"
    assert any("no --http-target" in n for n in notes(r))


def test_http_language_errors():
    base = ("  - id: t.h\n    title: t\n    requirements: [BQ-HTTP-2]\n    steps:\n")
    bad = {
        "      - http: {path: health}\n": "path: takes a string starting with /",
        "      - http: {method: FETCH, path: /h}\n": "method must be one of",
        "      - http: {path: /h, bogus: 1}\n": "http: unknown key 'bogus'",
        "      - http: {path: /h}\n        conn: 2\n": "conn: does not apply to an http: step",
        "      - http: {path: /h}\n        expect: {ok: {}}\n": "http: outcomes only",
        "      - send: {cmd: Ping}\n        expect: {http: {status: 200}}\n": "http: outcomes only",
        "      - http: {path: /h}\n        expect: {http: {status: ok}}\n": "status: takes a status",
        "      - http: {path: /h}\n        expect: {http: {body: x}}\n": "unknown outcome key 'body'",
    }
    for steps, message in bad.items():
        with pytest.raises(CaseError, match=message):
            cases_of(case(base + steps))


def fixed(make):
    """An aiohttp handler answering ``make()`` whatever the request."""
    async def handler(request: web.Request) -> web.Response:
        return make()
    return handler


class BrokenHttp:
    """An HTTP API wrong in one way per endpoint (the TCP side is the reference server)."""

    async def __aenter__(self) -> BrokenHttp:
        app = web.Application()
        app.router.add_get("/health", fixed(lambda: web.json_response({"ok": True})))  # no memory
        app.router.add_get("/healthz", fixed(lambda: web.Response(status=503, text="down")))
        app.router.add_get("/ready", fixed(lambda: web.Response(status=500)))
        app.router.add_get("/prometheus", fixed(lambda: web.json_response({"metrics": []})))
        app.router.add_get("/stats", fixed(lambda: web.Response(text="queued=0")))  # not JSON
        app.router.add_post("/queues/{q}/jobs",
                            fixed(lambda: web.json_response({"ok": True, "id": "j-fake"})))
        app.router.add_get("/queues/{q}/jobs", fixed(lambda: web.json_response({"ok": True, "job": None})))
        app.router.add_get("/jobs/{id}", fixed(lambda: web.json_response({"ok": False}, status=404)))
        app.router.add_post("/jobs/{id}/ack", fixed(lambda: web.json_response({"ok": True})))
        app.router.add_post("/jobs/{id}/fail", fixed(lambda: web.json_response({"ok": True})))
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.runner.cleanup()


@pytest.mark.asyncio
async def test_packaged_http_cases_against_a_broken_http_api():
    async def go():
        async with BunqueueServer(load_profile(BQ), "127.0.0.1", 0) as server, \
                BrokenHttp() as broken:
            return await runner.run_target("bunqueue", f"127.0.0.1:{server.port}", profile=BQ,
                                           select=["bunqueue.http.*"], timeout=2.0,
                                           http_target=f"127.0.0.1:{broken.port}")
    run = await go()
    verdicts = {r.case.id: r.verdict for r in run.results}
    assert verdicts.pop("bunqueue.http.api") is Verdict.PASS  # it does answer HTTP
    # every other endpoint is wrong in its own way: each case catches it, as a SHOULD
    assert verdicts and set(verdicts.values()) == {Verdict.NON_STRICT}, verdicts
    reasons = {r.case.id: r.failed_checks[0].message for r in run.results if r.failed_checks}
    assert "memory is missing" in reasons["bunqueue.http.health"]
    assert "HTTP status 503, not 200" in reasons["bunqueue.http.healthz"]
    assert "the body is not JSON" in reasons["bunqueue.http.stats"]
    assert "content type 'application/json', not 'text/plain'" in reasons["bunqueue.http.prometheus"]
    assert "HTTP status 404, not 101" in reasons["bunqueue.http.websocket"]
    # the add-job case sees through the fake id: the job is not on the TCP side
    assert "step 2" in reasons["bunqueue.http.add-job"]


@pytest.mark.asyncio
async def test_http_target_that_does_not_answer_fails_the_step():
    async def go():
        async with BunqueueServer(load_profile(BQ), "127.0.0.1", 0) as server:
            from test_runner import free_port
            return await run_on(HTTP_CASE, f"127.0.0.1:{server.port}", timeout=1.0,
                                http_target=f"127.0.0.1:{free_port()}")
    r = one(await go())
    assert r.verdict is Verdict.NON_STRICT
    assert "cannot connect to 127.0.0.1" in r.failed_checks[0].message


@pytest.mark.asyncio
async def test_http_target_is_parsed_and_in_the_reproduction():
    c = cases_of(HTTP_CASE)[0]
    line = runner.reproduction(c, "bunqueue", "10.0.0.1:6789", BQ, http_target="10.0.0.1:6790")
    assert "--http-target 10.0.0.1:6790" in line
    with pytest.raises(ValueError, match="--http-target 'nope' is not HOST:PORT"):
        await runner.run_target("bunqueue", "127.0.0.1:1", cases=[c], http_target="nope")


# ---------------------------------------------------------------------------- coverage

def _result(rids: tuple[str, ...], verdict: Verdict) -> CaseResult:
    return CaseResult(Case(f"t.{verdict}.{rids[0]}", "t", "bunqueue", rids), verdict, [],
                      Transcript(), 0.0)


def test_coverage_counts_judged_cases_as_exercised_and_info_as_observed():
    prof = load_profile(BQ)
    cov = runner.coverage_of(prof, [
        _result(("BQ-CMD-PUSH", "BQ-HTTP-2"), Verdict.INFO),
        _result(("BQ-HTTP-2",), Verdict.PASS),
        _result(("BQ-CMD-PULL",), Verdict.FAIL),
        _result(("BQ-CMD-ACK",), Verdict.NON_STRICT),
        _result(("BQ-CMD-Stats",), Verdict.UNIMPLEMENTED),
        _result(("BQ-CMD-Count",), Verdict.ERROR),
        _result(("BQ-CMD-Ping",), Verdict.INFO),
    ])
    assert set(cov.exercised) == {"BQ-HTTP-2", "BQ-CMD-PULL", "BQ-CMD-ACK", "BQ-CMD-Stats"}
    assert set(cov.observed) == {"BQ-CMD-PUSH", "BQ-CMD-Ping"}  # BQ-HTTP-2 was also judged
    assert "BQ-CMD-Count" in cov.unobserved and "BQ-CMD-PUSH" not in cov.unobserved
    assert "BQ-CMD-PUSH" in cov.not_exercised
    assert cov.ratio == pytest.approx(4 / len(cov.applicable))


@pytest.mark.asyncio
async def test_reports_show_observed_only_requirements():
    from io import StringIO

    from rich.console import Console

    from queuewire.conformance.report import console as console_report
    from queuewire.conformance.report import html, json_report

    async def go():
        async with BunqueueServer(load_profile(BQ), "127.0.0.1", 0) as server:
            return await runner.run_target("bunqueue", f"127.0.0.1:{server.port}", profile=BQ,
                                           select=["bunqueue.http.healthz"])
    run = await go()
    assert run.coverage.observed == ("BQ-HTTP-3",) and not run.coverage.exercised
    doc = json_report.build([run])["runs"][0]["coverage"]
    assert doc["observed_ids"] == ["BQ-HTTP-3"] and doc["exercised"] == 0
    out = StringIO()
    console_report.print_run(Console(file=out, width=200), run)
    assert "observed only (INFO cases, not judged) (1): BQ-HTTP-3" in out.getvalue()
    assert "observed only, not judged (1)" in html.render([run])


# ---------------------------------------------------------------------------- caps

@pytest.mark.asyncio
async def test_decoded_views_are_capped_and_bytes_kept_for_replay():
    big = "x" * 5000
    text = case(f"""
  - id: t.cap
    title: a big job is recorded whole in bytes, shortened in its views
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {{cmd: PUSH, queue: "${{queue}}", data: {{big: "{big}"}}}}
        save: {{job: id}}
      - send: {{cmd: GetJob, id: "${{job}}"}}
        expect: {{ok: {{job: {{data: {{big: "{big}"}}}}}}}}
    cleanup:
      - send: {{cmd: Obliterate, queue: "${{queue}}"}}
""")
    r = one(await run_on(text, "embedded"))
    assert r.verdict is Verdict.PASS, [c.message for c in r.failed_checks]  # judged on values
    push = next(e for e in r.transcript.events if e.direction == "send")
    shown = push.decoded["data"]["big"]
    assert shown.startswith("x" * wire.VIEW_TEXT_MAX) and shown.endswith(
        "…[5000 characters, shortened]") and len(shown) < 1100
    assert big.encode() in push.data  # the bytes are whole
    got = [e for e in r.transcript.events if e.direction == "recv"
           and isinstance(e.decoded, dict) and "job" in e.decoded]
    assert got and got[0].decoded["job"]["data"]["big"].endswith("characters, shortened]")
    assert big.encode() in got[0].data
    assert wire.cap_view(list(range(wire.VIEW_ITEMS_MAX + 5)))[-1] == \
        f"…[{wire.VIEW_ITEMS_MAX + 5} items, shortened]"


@pytest.mark.asyncio
async def test_sends_over_the_record_limit_replay_exactly_only_when_the_rest_is_zero(
        monkeypatch, tmp_path):
    monkeypatch.setattr(wire, "RECORD_LIMIT", 1024)
    text = case("""
  - id: t.big
    title: two sends over the record limit
    requirements: [BQ-FRAME-1]
    steps:
      - send_raw: {length_prefix: 4000, body_bytes: 4000}
        expect: {any_of: [{close: true}, {error: true}, {none: 100}]}
      - conn: 2
        send_raw: {hex: "41", repeat: 3000}
        expect: {any_of: [{close: true}, {error: true}, {none: 100}]}
""")
    run = await run_on(text, "embedded")
    r = one(run)
    sends = [e for e in r.transcript.events if e.direction == "send"]
    assert [len(e.data) for e in sends] == [1024, 1024]
    assert "4004 bytes sent; the transcript keeps the first 1024" in sends[0].note
    assert "the other 2980 are zero bytes" in sends[0].note
    assert "3000 bytes sent" in sends[1].note and "zero" not in sends[1].note
    path = tmp_path / "t.big.json"
    path.write_text(json.dumps(case_document(run, r), default=str))
    loaded = load_case_file(path)

    async def again():
        async with BunqueueServer(load_profile(BQ), "127.0.0.1", 0) as server:
            return await replay(loaded, "127.0.0.1", server.port, timeout=1.0)
    res = await again()
    inexact = [w for w in res.warnings if "cannot replay exactly" in w]
    assert len(inexact) == 1 and "conn 2: cannot replay exactly: 1976 bytes were not recorded" \
        in inexact[0]


def test_case_files_store_big_events_compressed(tmp_path):
    t = Transcript()
    t.add(1, "open", note="connected")
    payload = b"\x00\x00\x00\x10" + b"y" * 200_000
    t.add(1, "send", payload, {"cmd": "PUSH"})
    c = Case("t.z", "t", "bunqueue", ("BQ-FRAME-1",))
    r = CaseResult(c, Verdict.FAIL, [], t, 0.0)
    from queuewire.conformance.model import Coverage, TargetRun
    run = TargetRun("embedded", "bunqueue", BQ, [r], Coverage((), (), ()), "", 0.0)
    doc = case_document(run, r)
    ev = doc["transcript"][1]
    assert "hex" not in ev and ev["bytes"] == len(payload) and len(ev["zlib_base64"]) < 10_000
    path = tmp_path / "t.z.json"
    path.write_text(json.dumps(doc))
    assert load_case_file(path).events[1].data == payload


def test_cli_http_target_option(tmp_path):
    from click.testing import CliRunner

    from queuewire.cli import main

    cli = CliRunner()
    res = cli.invoke(main, ["conform", "server", "--protocol", "bunqueue", "--target", "embedded",
                            "--http-target", "127.0.0.1:6790"])
    assert res.exit_code == 2 and "1 --http-target for 0 --target" in res.output
    res = cli.invoke(main, ["conform", "server", "--protocol", "bunqueue", "--target",
                            "127.0.0.1:1", "--http-target", "nohost"])
    assert res.exit_code == 2 and "is not HOST:PORT" in res.output
    res = cli.invoke(main, ["conform", "server", "--protocol", "bunqueue", "--target", "embedded",
                            "--select", "bunqueue.http.health*", "--json", str(tmp_path / "r.json")])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "r.json").read_text())
    assert doc["runs"][0]["counts"]["PASS"] == 2  # health and healthz, over the embedded HTTP API


@pytest.mark.asyncio
async def test_quicx_cleanup_is_sent_and_not_judged():
    text = case("""
  - id: t.qx.cleanup
    title: a quicx case whose MUST step fails still sends its cleanup
    requirements: [QX-HB-1]
    steps:
      - send: {type: MSG_HEARTBEAT}
        expect: {message: {type: MSG_OK}, level: MUST}
    cleanup:
      - send: {type: MSG_HEARTBEAT}
        expect: {message: {type: MSG_STATS_RESPONSE}}
""")
    r = one(await run_on(text, "embedded", protocol="quicx", profile="quicx/v1"))
    assert r.verdict is Verdict.FAIL and [c.step for c in r.checks] == [1]
    sends = [e for e in r.transcript.events if e.direction == "send"]
    assert len(sends) == 2
    assert any(n.startswith("cleanup (not judged): step 2: expected MSG_STATS_RESPONSE")
               for n in notes(r))
