"""The sans-IO inventory (queuewire.traffic.inventory): surveys, removals, residue, health.

The module owns no socket: it makes request maps and reads reply maps, so these tests feed it
replies shaped as the reference server and the real bunqueue 2.9.5 send them (the 2.9.5
ListQueues answers bare names; a fuzzer leaves queues named 490 or True). The same code runs
over real TCP in tests/conformance/test_residue.py and against the real server in
tests/interop/test_conformance_real_bunqueue.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from queuewire.spec import load_profile
from queuewire.traffic.inventory import (
    HealthWatch,
    Inventory,
    Survey,
    ident,
    probe_requests,
    probe_results,
    removals,
    settle,
    take,
)

RES = load_profile("bunqueue/v2").model.resources


class Server:
    """A server's state as plain data, answering the list commands the survey sends."""

    def __init__(self, queues: list[Any], webhooks: list[dict] = (), crons: list[dict] = (),
                 dlq: dict[Any, list[str]] | None = None, counts: dict[Any, dict] | None = None,
                 refuse: set[str] = frozenset()):
        self.queues, self.webhooks, self.crons = list(queues), list(webhooks), list(crons)
        self.dlq, self.counts, self.refuse = dict(dlq or {}), dict(counts or {}), set(refuse)
        self.seen: list[dict] = []

    def answer(self, req: dict) -> Any:
        self.seen.append(req)
        cmd = req["cmd"]
        if cmd in self.refuse:
            return {"ok": False, "error": f"{cmd} failed"}
        if cmd == "ListQueues":
            return {"ok": True, "queues": list(self.queues)}
        if cmd == "ListWebhooks":
            return {"ok": True, "data": {"webhooks": list(self.webhooks), "stats": {}}}
        if cmd == "CronList":
            return {"ok": True, "crons": list(self.crons)}
        if cmd == "ListWorkers":
            return {"ok": True, "data": {"workers": [], "stats": {}}}
        if cmd == "Dlq":
            return {"ok": True, "jobs": [{"id": i} for i in self.dlq.get(req["queue"], [])]}
        if cmd == "GetJobCounts":
            return {"ok": True, "counts": self.counts.get(req["queue"], {"waiting": 0})}
        return None  # no reply

    def exchange(self, requests: list[dict]) -> list[Any]:
        return [self.answer(r) for r in requests]


def test_a_survey_lists_the_server_wide_kinds_then_each_queue():
    server = Server(["emails", {"name": "jobs", "waiting": 1}],
                    webhooks=[{"id": "w1", "url": "https://x", "queue": "", "events": []}],
                    dlq={"emails": ["j1"]}, counts={"jobs": {"waiting": 2, "active": 0}})
    survey = Survey(RES)
    first = survey.requests()
    assert first == [{"cmd": "ListWebhooks"}, {"cmd": "CronList"}, {"cmd": "ListWorkers"},
                     {"cmd": "ListQueues"}]
    with pytest.raises(RuntimeError, match="feed the replies"):
        survey.requests()
    survey.feed(server.exchange(first))
    second = survey.requests()
    assert {"cmd": "Dlq", "queue": "emails"} in second and \
        {"cmd": "GetJobCounts", "queue": "jobs"} in second and len(second) == 4
    survey.feed(server.exchange(second))
    assert survey.done and survey.requests() == []
    inv = survey.result()
    # a bare name (bunqueue 2.9.5) and a {name, ...} map (the documents) are both queues
    assert sorted(i.key for i in inv.of("queues")) == ["emails", "jobs"]
    hook = inv.of("webhooks")[0]
    assert hook.key == "w1" and dict(hook.detail) == {"url": "https://x", "queue": ""}
    assert [(i.key, i.parent) for i in inv.of("dlq")] == [("j1", "emails")]
    assert {(i.key, i.count) for i in inv.of("jobs") if i.parent == "jobs"} == \
        {("waiting", 2), ("active", 0)}
    assert inv.unlisted == {}


def test_what_cannot_be_listed_is_kept_with_the_reason():
    server = Server(["q"], refuse={"CronList", "Dlq"})
    inv = take(RES, server.exchange)
    assert inv.unlisted == {"crons": "CronList: error 'CronList failed'",
                            "dlq in 'q'": "Dlq: error 'Dlq failed'"}
    assert not inv.listed(RES.kinds["crons"]) and inv.listed(RES.kinds["queues"])
    inv = take(RES, lambda reqs: [None] * len(reqs))
    assert inv.unlisted["queues"] == "ListQueues: no reply"


def test_keys_keep_their_type_so_true_one_and_the_string_one_are_three_queues():
    before = take(RES, Server(["1"]).exchange)
    after = take(RES, Server(["1", 1, True, 1.7976931348623157e308]).exchange)
    new = after.new_since(before)
    assert [i.key for i in new] == [1, True, 1.7976931348623157e308]
    assert [type(i.key) for i in new] == [int, bool, float]
    assert ident(True) != ident(1)


def test_removals_take_what_appeared_webhooks_first_and_not_what_goes_with_a_queue():
    hook = {"id": "w9", "url": "https://x", "queue": "a b!", "events": []}
    before = take(RES, Server(["old"]).exchange)
    after = take(RES, Server(["old", 490, "new"], webhooks=[hook],
                             crons=[{"name": "c1", "queue": "new"}],
                             dlq={"new": ["j1"], "old": ["j2"]}).exchange)
    plan = removals(RES, before, after)
    assert [r.request for r in plan] == [
        {"cmd": "RemoveWebhook", "webhookId": "w9"},
        {"cmd": "CronDelete", "name": "c1"},
        {"cmd": "Obliterate", "queue": 490},       # the key as the server sent it
        {"cmd": "Obliterate", "queue": "new"},
    ]  # j1 goes with its new queue; j2, in a queue there before, has no removal command


def test_settle_says_what_was_removed_and_why_the_rest_is_left():
    before = take(RES, Server(["old"], crons=[{"name": "keep"}]).exchange)
    after_server = Server(["old", "q1", "q2"], crons=[{"name": "keep"}, {"name": "c1"}],
                          dlq={"old": ["j2"]})
    after = take(RES, after_server.exchange)
    plan = removals(RES, before, after)
    outcomes = {r.item.ident: {"ok": True} for r in plan}
    q2 = next(r for r in plan if r.request.get("queue") == "q2")
    outcomes[q2.item.ident] = {"ok": False, "error": "Queue is busy"}
    # after the removals: q1 and c1 gone, q2 refused, and a queue made while removing
    final = take(RES, Server(["old", "q2", "late"], crons=[{"name": "keep"}],
                             dlq={"old": ["j2"]}).exchange)
    res = settle(RES, before, after, outcomes, final)
    assert sorted(i.text() for i in res.appeared) == \
        ["crons 'c1'", "dlq 'j2' in 'old'", "queues 'q1'", "queues 'q2'"]
    assert sorted(i.text() for i in res.removed) == ["crons 'c1'", "queues 'q1'"]
    why = {left.item.key: left.reason for left in res.left}
    assert why["q2"] == "Obliterate answered error 'Queue is busy'"
    assert why["late"] == "appeared after the run's last command (while removing)"
    assert why["j2"].startswith("held in queues 'old', which was there before the run")
    assert not res.clean


def test_settle_leaves_what_the_last_inventory_could_not_see():
    before = take(RES, Server([]).exchange)
    after = take(RES, Server(["q1"]).exchange)
    final = take(RES, Server([], refuse={"ListQueues"}).exchange)
    res = settle(RES, before, after, {}, final)
    assert res.removed == () and [left.reason for left in res.left] == \
        ["not known to be gone: ListQueues: error 'ListQueues failed'"]


def test_counts_that_grew_in_a_queue_there_before_are_left_with_their_growth():
    before = take(RES, Server(["old"], counts={"old": {"waiting": 3, "failed": 1}}).exchange)
    after = take(RES, Server(["old"], counts={"old": {"waiting": 5, "failed": 1}}).exchange)
    grown = after.new_since(before)
    assert [(i.key, i.count, i.text()) for i in grown] == [("waiting", 2, "2 jobs waiting in 'old'")]
    assert removals(RES, before, after) == []


def test_probes_are_the_server_wide_lists_and_the_spec_probes():
    names = [n for n, _ in probe_requests(RES)]
    assert names[:4] == ["ListWebhooks", "CronList", "ListWorkers", "ListQueues"]
    assert set(RES.probes) <= set(names)
    assert probe_results(["Ping", "Prometheus", "Stats"],
                         [{"ok": True}, {"ok": False, "error": "value.replaceAll is not a function"},
                          None]) == {"Ping": None, "Prometheus":
                                     "error 'value.replaceAll is not a function'",
                                     "Stats": "no reply"}


def test_a_break_is_blamed_on_the_units_running_since_the_last_ok_answer():
    watch = HealthWatch()
    watch.baseline({"Ping": None, "Prometheus": None, "Metrics": "error 'off'"}, began=0.0)
    assert watch.failing_before == {"Metrics": "error 'off'"} and watch.watched == ("Ping", "Prometheus")
    watch.started("a", 1.0)
    watch.finished("a", 2.0)
    assert watch.observe({"Ping": None, "Prometheus": None}, began=2.5, ended=2.6) == []
    watch.started("b", 3.0)
    watch.started("c", 3.5)       # still running when the probe fails
    watch.finished("b", 4.0)
    new = watch.observe({"Ping": None, "Prometheus": "error 'boom'", "Metrics": "error 'x'"},
                        began=4.5, ended=4.6)
    assert [(b.probe, b.units) for b in new] == [("Prometheus", ("b", "c"))]  # not "a"
    assert new[0].text() == "server broken after cases b, c: Prometheus now answers error 'boom'"
    assert watch.broken == ("Prometheus",)
    # still failing: no second break; then it recovers after the removals
    assert watch.observe({"Prometheus": "error 'boom'"}, began=5.0, ended=5.1) == []
    watch.finished("c", 5.5)
    assert watch.observe({"Prometheus": None}, 6.0, 6.1, after="after the removals") == []
    assert watch.breaks[0].recovered and watch.broken == ()
    assert watch.breaks[0].text().endswith("(answers ok again after the removals)")


def test_with_one_unit_at_a_time_the_break_names_exactly_the_case_before():
    watch = HealthWatch()
    watch.baseline({"Prometheus": None}, began=0.0)
    t = 1.0
    for unit, err in (("one", None), ("two", None), ("three", "error 'x'"), ("four", "error 'x'")):
        watch.started(unit, t)
        watch.finished(unit, t + 1)
        new = watch.observe({"Prometheus": err}, began=t + 1.5, ended=t + 1.6)
        if unit == "three":
            assert [b.units for b in new] == [("three",)]
        else:
            assert new == []
        t += 2
    assert Inventory().new_since(Inventory()) == []
