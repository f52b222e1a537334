"""Learning the job lifecycle from outside (issue 29, its first part): the machine the spec's
table implies, the comparison of two machines, and L* (AALpy) against the reference server
over real TCP: under every bunqueue profile the learned machine equals the table's, and a
deliberately broken server is reported with the shortest input sequence that shows it."""

from __future__ import annotations

import asyncio

import pytest

from queuewire.client import Queue
from queuewire.learn import (
    Mealy,
    difference,
    differences,
    learn_machine,
    learn_section,
    spec_machine,
)
from queuewire.learn.cases import deciding_rule, difference_case
from queuewire.reference_server.bunqueue import BunqueueEngine, BunqueueServer, NullStore
from queuewire.spec import load_profile, profile_names

BUNQUEUE = profile_names("bunqueue")


#: every learning run here is bounded: a budget it spends is an error, not a hang
BUDGET = {"max_queries": 20_000, "max_seconds": 120.0}


def table_machine(profile: str) -> tuple[Mealy, object]:
    prof = load_profile(profile)
    learn = learn_section(prof.tree, "job_lifecycle")
    return spec_machine(learn), learn


def test_the_table_implies_a_machine_with_the_states_a_learner_can_see():
    machine, learn = table_machine("bunqueue/v2")
    # an output: the reply class, the job's state, whether its custom id finds it
    assert machine.run(["push", "pull", "ack"]) == [
        "ok/waiting/found", "ok/active/found", "ok/completed/found"]
    assert machine.run(["ack"]) == ["-/none/-"]                            # no job: not sent
    assert machine.run(["push", "ack"]) == ["ok/waiting/found", "-/waiting/found"]  # no token
    assert [o.rsplit("/", 1)[0] for o in machine.run(
        ["push_delayed", "promote", "pull", "fail", "retry_dlq"])] == [
        "ok/delayed", "ok/waiting", "ok/active", "ok/failed", "ok/waiting"]
    assert machine.run(["push", "promote", "retry_dlq"]) == [
        "ok/waiting/found", "error/waiting/found", "ok/waiting/found"]   # the inputs' otherwise
    # Cancel removes a waiting or delayed job: GetState is refused, the custom id finds nothing
    assert machine.run(["push_delayed", "cancel", "promote"]) == [
        "ok/delayed/found", "ok/removed/not found", "error/removed/not found"]
    assert machine.run(["push", "pull", "cancel", "ack_no_token"]) == [
        "ok/waiting/found", "ok/active/found", "error/active/found", "error/active/found"]
    states = {s[0] for s in machine.states}
    assert states == {"none", "waiting", "delayed", "active", "completed", "failed", "removed"}
    # every row whose event is an input is reachable and taken
    driven = {e["event"] for e in learn.inputs.values() if "event" in e}
    assert {ev for (_, ev) in learn.rows} & driven == driven


def test_difference_is_the_shortest_word_and_none_for_equal_machines():
    a = Mealy("s0", ("x", "y"), {("s0", "x"): ("1", "s1"), ("s0", "y"): ("0", "s0"),
                                 ("s1", "x"): ("1", "s1"), ("s1", "y"): ("2", "s0")})
    b = Mealy("t0", ("x", "y"), {("t0", "x"): ("1", "t1"), ("t0", "y"): ("0", "t0"),
                                 ("t1", "x"): ("1", "t1"), ("t1", "y"): ("3", "t0")})
    assert difference(a, b) == (["x", "y"], ["1", "2"], ["1", "3"])
    assert difference(a, a) is None and differences(a, a) == []
    # every first parting, once per spec transition, not what follows it
    assert differences(a, b) == [(["x", "y"], ["1", "2"], ["1", "3"])]


def learn_from(profile: str, engine: BunqueueEngine | None = None):
    prof = load_profile(profile)
    learn = learn_section(prof.tree, "job_lifecycle")

    async def go():
        server = await BunqueueServer(prof, port=0, engine=engine).start()
        try:
            learned = await asyncio.to_thread(learn_machine, prof, "127.0.0.1", server.port,
                                              learn, seed=1, **BUDGET)
            async with Queue("qw-probe", connection={"port": server.port}, profile=prof) as q:
                names = [n.get("name") if isinstance(n, dict) else n for n in await q.list_queues()]
            return learned, [n for n in names if str(n).startswith("qw-learn-")]
        finally:
            await server.stop()
    return asyncio.run(go())


@pytest.mark.parametrize("profile", BUNQUEUE)
def test_the_reference_server_implements_the_table(profile: str):
    (learned, left) = learn_from(profile)
    machine, _ = table_machine(profile)
    assert difference(machine, learned.machine) is None
    assert len(learned.machine.states) == len(machine.states)
    assert learned.requests > learned.queries > 0 and left == []


class NeedsTwoAcks(BunqueueEngine):
    """The first ACK of a job is answered ok and leaves it active: a state the table does not
    have (acknowledged once, still active)."""

    def _move(self, job, event, now, **timeline):
        once = self.__dict__.setdefault("_acked_once", set())
        if event == "ACK" and job.id not in once:
            once.add(job.id)
            return
        super()._move(job, event, now, **timeline)


def test_a_broken_server_is_reported_with_the_shortest_sequence():
    prof = load_profile("bunqueue/v2")
    learned, _ = learn_from("bunqueue/v2", NeedsTwoAcks(prof, store=NullStore()))
    machine, learn = table_machine("bunqueue/v2")
    assert len(learned.machine.states) > len(machine.states)   # states the table does not have
    word, spec_says, server_says = difference(machine, learned.machine)
    assert word == ["push", "pull", "ack"]
    assert (spec_says[-1], server_says[-1]) == ("ok/completed/found", "ok/active/found")
    # the row that sequence's last input drives, and the requirement it cites
    assert learn.rows[("active", learn.inputs["ack"]["event"])] == ("completed", "BQ-JOB-4")
    assert [d[0] for d in differences(machine, learned.machine)][0] == ["push", "pull", "ack"]
    case = difference_case(learn, word, spec_says, server_says)
    assert case["requirements"][-1] == "BQ-JOB-4"
    assert [s["send"]["cmd"] for s in case["steps"]] == [
        "PUSH", "GetState", "GetJobByCustomId", "PULL", "GetState", "GetJobByCustomId",
        "ACK", "GetState", "GetJobByCustomId"]
    assert case["steps"][-2]["expect"] == {"ok": {"state": "completed"}, "requirement": "BQ-JOB-4"}
    assert deciding_rule(learn, word, spec_says, server_says) == ("BQ-JOB-4", None)
