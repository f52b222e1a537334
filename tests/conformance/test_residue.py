"""A conformance run leaves the server as it found it, and says when a case broke it.

Over real TCP: the reference bunqueue server in process (one server across several runs, so a
run's leftovers are there for the next inventory) and, for a server that breaks, a small
bunqueue server written here whose Prometheus fails while it holds a queue whose name is not a
string (what the real bunqueue 2.9.5 does, checked against it in
tests/interop/test_conformance_real_bunqueue.py). The inventories, the removals and the
probes are queuewire.conformance.residue over queuewire.traffic.inventory.
"""

from __future__ import annotations

from typing import Any

import pytest
from test_runner import BQ, FakeBunqueue, cases_of

from queuewire.conformance import runner
from queuewire.conformance.residue import KEPT, Link
from queuewire.conformance.targets import embedded
from queuewire.spec import load_profile

PROFILE = load_profile(BQ)
RES = PROFILE.model.resources

# Cases that each leave one thing behind (no cleanup), and one that cleans up. The reference
# server drops a worker when the connection that registered it closes, so t.leak.worker
# leaves nothing there (the real bunqueue 2.9.5 keeps it).
LEAKY = """
cases:
  - id: t.leak.webhook
    title: a webhook
    requirements: [BQ-CMD-AddWebhook]
    steps:
      - send: {cmd: AddWebhook, url: "https://example.com/${queue}", events: [job.completed],
               queue: "${queue}"}
        expect: {ok: {}}
  - id: t.leak.cron
    title: a schedule
    requirements: [BQ-CMD-Cron]
    steps:
      - send: {cmd: Cron, name: "${queue}", queue: "${queue}", data: {}, schedule: "0 0 1 1 *"}
        expect: {ok: {}}
  - id: t.leak.worker
    title: a worker
    requirements: [BQ-CMD-RegisterWorker]
    steps:
      - send: {cmd: RegisterWorker, name: leaky, queues: ["${queue}"]}
        expect: {ok: {}}
  - id: t.leak.queue
    title: a queue with a job
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {n: 1}}
        expect: {ok: {}}
  - id: t.tidy
    title: a queue removed by its cleanup
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {n: 1}}
        expect: {ok: {}}
    cleanup:
      - send: {cmd: Obliterate, queue: "${queue}"}
"""


async def inventory(host: str, port: int, token: str | None = None) -> Any:
    """The server's inventory, taken apart from any run."""
    return await Link(PROFILE, host, port, 2.0, token).inventory(RES)


def kinds(items: Any) -> list[str]:
    return sorted(i.kind for i in items)


@pytest.mark.asyncio
async def test_a_run_removes_what_its_cases_left_and_leaves_the_rest_alone():
    async with embedded("bunqueue", BQ) as (host, port):
        link = Link(PROFILE, host, port, 2.0, None)
        # the server's own data, there before the run: a queue with two jobs and a webhook
        await link.exchange([{"cmd": "PUSH", "queue": "mine", "data": {}}] * 2 + [
            {"cmd": "AddWebhook", "url": "https://example.com/mine", "events": ["job.failed"]}])
        before = await inventory(host, port)
        assert kinds(before.items.values()).count("queues") == 1
        run = await runner.run_target("bunqueue", f"{host}:{port}", profile=BQ,
                                      cases=cases_of(LEAKY), jobs=2)
        assert {r.verdict.value for r in run.results} == {"PASS"}
        res = run.residue
        assert res is not None and res.removing and res.clean and res.breaks == []
        assert kinds(res.residue.appeared) == ["crons", "queues", "webhooks"]
        assert kinds(res.residue.removed) == ["crons", "queues", "webhooks"]
        assert res.residue.left == () and res.residue.unlisted == {}
        assert res.summary() == "server residue: the cases left 3 thing(s) on the server; " \
                                "3 removed by the run"
        hook = next(i for i in res.residue.removed if i.kind == "webhooks")
        assert dict(hook.detail)["url"].startswith("https://example.com/qw-t.leak.webhook-")
        data = res.jsonable()
        assert data["clean"] and [i["kind"] for i in data["removed"]] == \
            ["webhooks", "crons", "queues"]  # the spec's removal order
        # listed again apart from the run: exactly what was there before, its jobs included
        after = await inventory(host, port)
        assert set(after.items) == set(before.items)
        assert [(i.key, i.count) for i in after.of("jobs") if i.parent == "mine"
                and i.key == "waiting"] == [("waiting", 2)]
        # a second run finds nothing to remove
        again = await runner.run_target("bunqueue", f"{host}:{port}", profile=BQ,
                                        cases=cases_of(LEAKY), select=["t.tidy"])
        assert again.residue is not None and again.residue.residue.appeared == ()
        assert again.residue.summary().startswith("server left as found (webhooks, crons")


@pytest.mark.asyncio
async def test_keep_residue_reports_what_the_cases_left_and_removes_nothing():
    async with embedded("bunqueue", BQ) as (host, port):
        run = await runner.run_target("bunqueue", f"{host}:{port}", profile=BQ,
                                      cases=cases_of(LEAKY), remove_residue=False)
        res = run.residue
        assert res is not None and not res.removing and not res.clean
        assert res.residue.removed == ()
        assert kinds(left.item for left in res.residue.left) == ["crons", "queues", "webhooks"]
        assert {left.reason for left in res.residue.left} == {KEPT}
        assert any(line.startswith("  left: webhooks ") and line.endswith(KEPT)
                   for line in res.lines())
        still = await inventory(host, port)
        assert kinds(i for i in still.items.values() if i.count is None) == \
            ["crons", "queues", "webhooks"]


@pytest.mark.asyncio
async def test_the_token_never_shows_in_the_residue():
    token = "s3cret-token-4711"
    text = LEAKY.replace('url: "https://example.com/${queue}"', 'url: "https://example.com/${token}"')
    async with embedded("bunqueue", BQ, auth_tokens=(token,)) as (host, port):
        run = await runner.run_target("bunqueue", f"{host}:{port}", profile=BQ, auth_token=token,
                                      cases=cases_of(text), select=["t.leak.webhook"])
        assert run.residue is not None
        assert [i.kind for i in run.residue.residue.removed] == ["webhooks"]
        shown = str(run.residue.jsonable()) + "\n".join(run.residue.lines())
        assert "example.com/" in shown and token not in shown


class PrometheusBreaker:
    """A bunqueue server (lists, Ping, Stats, Metrics, Prometheus, PUSH, Obliterate) whose
    Prometheus fails while a queue is named by something other than a string, as bunqueue
    2.9.5's does (``value.replaceAll is not a function``)."""

    ERROR = "value.replaceAll is not a function"

    def __init__(self) -> None:
        self.queues: list[Any] = []

    def __call__(self, msg: dict) -> list[dict]:
        cmd, rid = msg.get("cmd"), msg.get("reqId")
        body: dict[str, Any] = {"ok": True}
        if cmd == "PUSH":
            if msg.get("queue") not in self.queues:
                self.queues.append(msg.get("queue"))
            body["id"] = f"j{len(self.queues)}"
        elif cmd == "Obliterate":
            self.queues = [q for q in self.queues if q != msg.get("queue")
                           or type(q) is not type(msg.get("queue"))]
        elif cmd == "ListQueues":
            body["queues"] = list(self.queues)
        elif cmd in ("ListWebhooks", "ListWorkers"):
            body["data"] = {"webhooks" if cmd == "ListWebhooks" else "workers": [], "stats": {}}
        elif cmd == "CronList":
            body["crons"] = []
        elif cmd == "Dlq":
            body["jobs"] = []
        elif cmd == "GetJobCounts":
            body["counts"] = {"waiting": 0}
        elif cmd == "Prometheus":
            if any(not isinstance(q, str) for q in self.queues):
                body = {"ok": False, "error": self.ERROR}
            else:
                body["data"] = {"metrics": "# HELP\n"}
        elif cmd not in ("Ping", "Stats", "Metrics", "Hello"):
            body = {"ok": False, "error": f"Unknown command: {cmd}"}
        return [dict(body, reqId=rid)]


BREAKS = """
cases:
  - id: t.one
    title: a string queue
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {}}
        expect: {ok: {}}
    cleanup:
      - send: {cmd: Obliterate, queue: "${queue}"}
  - id: t.number-queue
    title: a queue named 490
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: 490, data: {}}
        expect: {any_of: [{ok: {}}, {error: true}]}
  - id: t.three
    title: another string queue
    requirements: [BQ-CMD-PUSH]
    steps:
      - send: {cmd: PUSH, queue: "${queue}", data: {}}
        expect: {ok: {}}
    cleanup:
      - send: {cmd: Obliterate, queue: "${queue}"}
"""


@pytest.mark.asyncio
async def test_a_case_that_breaks_a_probe_is_named_and_the_removal_mends_it():
    seen: list[tuple[str, Any]] = []
    async with FakeBunqueue(PrometheusBreaker()) as fake:
        run = await runner.run_target("bunqueue", fake.target, profile=BQ,
                                      cases=cases_of(BREAKS), timeout=2.0,
                                      progress=lambda kind, value: seen.append((kind, value)))
    assert [r.verdict.value for r in run.results] == ["PASS", "PASS", "PASS"]  # not a verdict
    res = run.residue
    assert res is not None and not res.clean
    [brk] = res.breaks
    # one case at a time: exactly the case before the failing probe round
    assert (brk.probe, brk.units) == ("Prometheus", ("t.number-queue",))
    assert brk.error == f"error {PrometheusBreaker.ERROR!r}"
    assert brk.recovered and brk.recovered_after == "after the removals"
    assert res.still_broken == ()
    assert brk.text() == ("server broken after case t.number-queue: Prometheus now answers "
                          "error 'value.replaceAll is not a function' (answers ok again after "
                          "the removals)")
    assert [i.key for i in res.residue.removed] == [490]
    # the break was reported when seen, between the cases, before the residue
    kinds_seen = [k for k, _ in seen]
    assert kinds_seen.index("break") < kinds_seen.index("residue") < kinds_seen.index("done")
    assert [k for k in kinds_seen if k in ("case", "break")] == ["case", "case", "break", "case"]


@pytest.mark.asyncio
async def test_concurrent_cases_share_the_blame():
    async with FakeBunqueue(PrometheusBreaker()) as fake:
        run = await runner.run_target("bunqueue", fake.target, profile=BQ,
                                      cases=cases_of(BREAKS), timeout=2.0, jobs=3)
    assert run.residue is not None
    [brk] = run.residue.breaks
    assert brk.probe == "Prometheus" and "t.number-queue" in brk.units
    assert set(brk.units) <= {"t.one", "t.number-queue", "t.three"}


@pytest.mark.asyncio
async def test_a_server_that_answers_no_probe_is_not_inventoried():
    async with FakeBunqueue(lambda m: None) as fake:
        run = await runner.run_target("bunqueue", fake.target, profile=BQ, timeout=0.2,
                                      cases=cases_of(BREAKS), select=["t.one"])
        sent = [m.get("cmd") for m in fake.requests]
    res = run.residue
    assert res is not None and res.failing_before and not res.breaks
    assert res.residue.unlisted["server"].startswith("no probe answered ok before the first case")
    # the first probe round, and nothing after it: no list per queue, no removal (the one
    # Obliterate is the case's cleanup), no more probes
    assert sent.count("Prometheus") == 1 and "Dlq" not in sent and sent.count("Obliterate") == 1


@pytest.mark.asyncio
async def test_quicx_runs_carry_no_residue():
    run = await runner.run_target("quicx", "embedded", cases=[], jobs=1)
    assert run.residue is None


OPTIONAL_SAVE = """
cases:
  - id: t.maybe-webhook
    title: a webhook the server may refuse; removed when it was made
    requirements: [BQ-CMD-AddWebhook]
    steps:
      - send: {cmd: AddWebhook, url: "https://example.com/${queue}", events: [job.completed], queue: "QUEUE"}
        expect: {any_of: [{error: true}, {ok: {}}]}
        save: {hook: "data.webhookId?"}
    cleanup:
      - send: {cmd: RemoveWebhook, webhookId: "${hook}"}
"""


@pytest.mark.asyncio
async def test_an_optional_save_keeps_the_id_of_what_was_made_for_the_cleanup():
    async with embedded("bunqueue", BQ) as (host, port):
        target = f"{host}:{port}"
        # made (a valid queue name): the id is saved and the cleanup removes the webhook
        made = await runner.run_target("bunqueue", target, profile=BQ,
                                       cases=cases_of(OPTIONAL_SAVE.replace("QUEUE", "${queue}")))
        # refused (an invalid name): nothing saved, the case still passes, the cleanup says why
        refused = await runner.run_target("bunqueue", target, profile=BQ,
                                          cases=cases_of(OPTIONAL_SAVE.replace("QUEUE", "a b!")))
    for run in (made, refused):
        assert run.results[0].verdict.value == "PASS"
        assert run.residue is not None and run.residue.residue.appeared == ()
    sent = [e.decoded.get("cmd") for e in made.results[0].transcript.events
            if e.direction == "send"]
    assert sent == ["AddWebhook", "RemoveWebhook"]
    notes = [e.note for e in refused.results[0].transcript.events if e.note]
    assert any("variable ${hook} is not set: the reply had no data.webhookId (an optional "
               "save:)" in n for n in notes), notes


def test_generated_cases_remove_what_an_accepted_invalid_probe_made():
    """The limit probes of a command that makes something (AddWebhook, RegisterWorker): an
    invalid value a lenient server accepts still made it, so its id is saved when the reply
    has one and the cleanup removes it (the six webhooks of issue 24 on bunqueue 2.9.5)."""
    from queuewire.conformance.generate_bunqueue import UNDO, limit_cases

    checked = 0
    for case in limit_cases(PROFILE):
        if case.command not in UNDO:
            continue
        undo_cmd, path, field = UNDO[case.command]
        for step in case.steps:
            if step.get("expect", {}).get("error") is True:
                [(var, saved)] = step["save"].items()
                assert saved == path + "?"
                assert {"send": {"cmd": undo_cmd, field: "${" + var + "}"}} in case.cleanup
                checked += 1
    assert checked >= 6  # queue name length (2) and pattern (1), for both commands


def test_generated_cases_name_only_their_own_queues():
    """Every queue field of a generated request is the case's ${queue} (QueueName and
    QueueRef alike), or a probe value the cleanup obliterates."""
    from queuewire.conformance.generate_bunqueue import all_cases

    for case in all_cases(PROFILE):
        removed = {s["send"].get("queue") for s in case.cleanup if "send" in s}
        for step in case.steps:
            req = step.get("send") or {}
            for name in ("queue", "queues"):
                values = req.get(name)
                for value in values if isinstance(values, list) else [values]:
                    if value is None or not isinstance(value, str) or "${" in value:
                        continue
                    assert value in removed, f"{case.id}: queue {value!r} is not removed"


WRONGLY_ACCEPTED = """
cases:
  - id: t.refused-webhook
    title: a webhook the server must refuse; removed all the same when it was made
    requirements: [BQ-CMD-AddWebhook]
    steps:
      - send: {cmd: AddWebhook, url: "https://example.com/${queue}", events: [job.completed]}
        expect: {error: true}
        save: {hook: "data.webhookId?"}
    cleanup:
      - send: {cmd: RemoveWebhook, webhookId: "${hook}"}
"""


@pytest.mark.asyncio
async def test_a_failed_check_still_leaves_the_cleanup_what_the_request_made():
    """The step's expectation fails (the server accepts what the case says it must refuse),
    which stops the case; the optional save was taken before the judgement, so the cleanup
    removes the webhook and the server is left as found."""
    async with embedded("bunqueue", BQ) as (host, port):
        run = await runner.run_target("bunqueue", f"{host}:{port}", profile=BQ,
                                      cases=cases_of(WRONGLY_ACCEPTED))
    (result,) = run.results
    assert result.verdict.value == "FAIL"
    sent = [e.decoded.get("cmd") for e in result.transcript.events if e.direction == "send"]
    assert sent == ["AddWebhook", "RemoveWebhook"]
    assert run.residue is not None and run.residue.residue.appeared == ()
