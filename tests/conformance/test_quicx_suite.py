"""The quicx conformance suite against the reference daemon and against broken daemons.

For each profile the whole suite runs once against the embedded reference daemon (a module
fixture): no case may FAIL or be an ERROR, at least 70 cases apply, and the cases cite at
least 90 % of the profile's requirement ids about the daemon. Then the suite runs against
daemons that each break one rule, so the tests show the cases can fail and fail where they
should: the reference daemon patched for the duration of a test (it answers MSG_READY on an
empty queue by holding the worker instead of MSG_WAIT; it accepts any header version; it
answers an unknown opcode with the wrong error code), and a tiny in-test proxy in front of the
reference daemon that writes MSG_STATS_RESPONSE figures little-endian; with a 1 MiB pool, a
daemon that answers an exhausted pool with PAYLOAD_TOO_LARGE (and the reference daemon, whose
QUEUE_FULL the pool case then reaches in both profiles). Each test derives the
cases that must fail from the cases themselves (their steps or ids), asserts exactly those
fail, and that every other case selected still passes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from queuewire.codecs.errors import ProtocolError
from queuewire.codecs.quicx import QuicxDecoder, QuicxEncoder
from queuewire.conformance import targets
from queuewire.conformance.model import TargetRun, Verdict
from queuewire.conformance.runner import load_cases, run_target
from queuewire.reference_server import quicx as quicx_daemon
from queuewire.reference_server.quicx import DEFAULT_POOL_BYTES, QuicxServer
from queuewire.spec import load_profile

PROFILES = ("quicx/v1", "quicx/1.0.3")
MIN_CASES = 70
MIN_COVERAGE = 0.90
BAD = (Verdict.FAIL, Verdict.ERROR)


async def _run(target: str, profile: str, select: tuple[str, ...] = (), timeout: float = 5.0) -> TargetRun:
    return await run_target("quicx", target, profile=profile, select=select,
                            timeout=timeout)


def _summary(run: TargetRun, verdicts=BAD) -> list[str]:
    out = []
    for r in run.results:
        if r.verdict in verdicts:
            why = r.error or "; ".join(c.message for c in r.failed_checks)[:300]
            out.append(f"{r.case.id} {r.verdict}: {why}")
    return out


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=PROFILES)
async def reference_run(request) -> TargetRun:
    return await _run("embedded", request.param)


def test_reference_daemon_passes_every_case(reference_run: TargetRun) -> None:
    assert reference_run.results, "no case ran"
    assert not _summary(reference_run, (Verdict.FAIL, Verdict.ERROR, Verdict.UNIMPLEMENTED,
                                        Verdict.NON_STRICT))


def test_enough_cases_apply(reference_run: TargetRun) -> None:
    assert len(reference_run.results) >= MIN_CASES
    counts = reference_run.counts()
    assert counts["PASS"] >= MIN_CASES - counts["INFO"]


def test_requirement_coverage(reference_run: TargetRun) -> None:
    cov = reference_run.coverage
    assert cov.ratio >= MIN_COVERAGE, f"not exercised: {cov.not_exercised}"
    profile = load_profile(reference_run.profile)
    roles = set(profile.model.peer_roles)
    assert all(profile.requirements[r].subject not in roles for r in cov.applicable)


@pytest.mark.parametrize("profile", PROFILES)
def test_cases_are_spec_names_and_unique(profile: str) -> None:
    cases = load_cases("quicx", profile)
    assert len({c.id for c in cases}) == len(cases)
    spec = load_profile(profile).model
    for case in cases:
        for step in case.steps:
            for key in ("send", "expect"):
                body = step.get(key) or {}
                name = body.get("type") or (body.get("message") or {}).get("type")
                assert name is None or name in spec.messages, (case.id, name)


# ------------------------------------------------------------------- broken daemons

def _expects_message(case, name: str) -> bool:
    def walk(node) -> bool:
        if isinstance(node, dict):
            msg = node.get("message")
            if isinstance(msg, dict) and msg.get("type") == name:
                return True
            return any(walk(v) for v in node.values())
        if isinstance(node, (list, tuple)):
            return any(walk(v) for v in node)
        return False
    return any(walk(step.get("expect")) for step in case.steps)


def _check_split(run: TargetRun, must_fail: set[str]) -> None:
    failed = {r.case.id for r in run.results if r.verdict is Verdict.FAIL}
    assert must_fail, "the broken rule is exercised by no case"
    assert must_fail <= {r.case.id for r in run.results}
    assert failed == must_fail, (f"missed: {sorted(must_fail - failed)}; "
                                 f"unexpected: {_summary(run) if failed - must_fail else []}")
    assert not [r for r in run.results if r.verdict is Verdict.ERROR], _summary(run)


@pytest.mark.asyncio
async def test_daemon_that_never_sends_wait(monkeypatch) -> None:
    """quicx/v1 daemon that holds an idle worker (as quicx/1.0.3 does) instead of MSG_WAIT."""
    init = quicx_daemon.QuicxEngine.__init__

    def patched(self, *args, **kwargs):
        init(self, *args, **kwargs)
        self._wait_when_empty = False

    monkeypatch.setattr(quicx_daemon.QuicxEngine, "__init__", patched)
    # each case waiting for a MSG_WAIT that never comes runs into the timeout: keep it short
    run = await _run("embedded", "quicx/v1", ("quicx.worker.*", "quicx.producer.*", "quicx.heartbeat.*"),
                     timeout=1.0)
    ran = {r.case.id for r in run.results}
    must_fail = {c.id for c in load_cases("quicx", "quicx/v1")
                 if c.id in ran and _expects_message(c, "MSG_WAIT")}
    must_fail.add("quicx.heartbeat.daemon-initiated")  # a logic case: READY, then MSG_WAIT
    # an unanswered MSG_READY is one defect: the first case to meet it fails, the others end
    # INFO naming it
    failed = {r.case.id for r in run.results if r.verdict is Verdict.FAIL}
    assert failed and failed <= must_fail, _summary(run)
    first = min(failed, key=[r.case.id for r in run.results].index)
    for r in run.results:
        if r.case.id in must_fail - failed:
            assert r.verdict is Verdict.INFO and any(
                c.kind == "blocked" and first in c.message for c in r.checks), r.case.id
    assert not [r for r in run.results if r.verdict is Verdict.ERROR], _summary(run)


@pytest.mark.asyncio
async def test_daemon_that_ignores_the_version(monkeypatch) -> None:
    """A daemon whose decoder takes any version byte as the current one."""
    init = quicx_daemon.QuicxConnection.__init__

    def patched(self, engine):
        init(self, engine)
        self.decoder._versions = frozenset(range(256))

    monkeypatch.setattr(quicx_daemon.QuicxConnection, "__init__", patched)
    run = await _run("embedded", "quicx/v1")
    must_fail = {c.id for c in load_cases("quicx", "quicx/v1") if "bad_version" in c.tags}
    _check_split(run, must_fail)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_daemon_with_wrong_code_for_unknown_opcodes(monkeypatch, profile: str) -> None:
    """A daemon that answers an unknown opcode with another error code than the profile's."""
    spec = load_profile(profile).model
    right = spec.error_replies["unknown_type"]
    wrong = next(e.code for e in spec.error_codes.values() if e.code != right)
    refuse = quicx_daemon.QuicxEngine.refuse

    def patched(self, conn, error):
        if error.kind == "unknown_type":
            return [quicx_daemon.Send(conn, "MSG_ERROR", self.encoder.error(wrong, "?"))]
        return refuse(self, conn, error)

    monkeypatch.setattr(quicx_daemon.QuicxEngine, "refuse", patched)
    select = ("quicx.vector.*", "quicx.coalesced.*", "quicx.heartbeat.*", "quicx.producer.*")
    run = await _run("embedded", profile, select)
    must_fail = {c.id for c in load_cases("quicx", profile)
                 if "unknown-type" in c.id or "unknown-opcode" in c.id}
    _check_split(run, must_fail)


SMALL_POOL = 1 << 20  # bytes: a pool the pool case fills within its frame budget


def _small_pool(monkeypatch) -> None:
    monkeypatch.setattr(targets, "EMBEDDED_POOL_BYTES", SMALL_POOL)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_pool_case_reaches_queue_full_on_a_small_pool(monkeypatch, profile: str) -> None:
    _small_pool(monkeypatch)
    run = await _run("embedded", profile, ("quicx.pool.*",))
    (res,) = run.results
    assert res.verdict is Verdict.PASS, _summary(run, tuple(Verdict))
    full = [c for c in res.checks if c.requirement == "QX-ERR-2"]
    assert full and all(c.ok and c.level == "MUST" for c in full)
    assert any(c.requirement == "QX-DONE-2" and c.ok for c in res.checks)


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.asyncio
async def test_pool_case_only_observes_a_pool_it_cannot_fill(monkeypatch, profile: str) -> None:
    """A pool larger than the probe's budget (frames and bytes) is not filled: INFO, not PASS."""
    monkeypatch.setattr(targets, "EMBEDDED_POOL_BYTES", 16 * DEFAULT_POOL_BYTES)
    run = await _run("embedded", profile, ("quicx.pool.*",))
    (res,) = run.results
    assert res.verdict is Verdict.INFO, _summary(run, tuple(Verdict))
    assert any("not reached" in c.message for c in res.checks)


@pytest.mark.asyncio
async def test_daemon_with_wrong_code_when_the_pool_is_full(monkeypatch) -> None:
    """A daemon that answers an exhausted pool with PAYLOAD_TOO_LARGE instead of QUEUE_FULL."""
    _small_pool(monkeypatch)
    spec = load_profile("quicx/v1").model
    wrong = spec.error_replies["task_too_large"]
    refuse = quicx_daemon.QuicxEngine._refuse

    def patched(self, peer, kind, detail):
        return refuse(self, peer, "task_too_large" if kind == "queue_full" else kind, detail)

    monkeypatch.setattr(quicx_daemon.QuicxEngine, "_refuse", patched)
    assert wrong != spec.error_replies["queue_full"]
    run = await _run("embedded", "quicx/v1", ("quicx.pool.*", "quicx.producer.*", "quicx.limit.*"))
    _check_split(run, {"quicx.pool.queue-full"})


@contextlib.asynccontextmanager
async def little_endian_stats_proxy(profile: str) -> AsyncIterator[int]:
    """The reference daemon behind a proxy that byte-swaps every MSG_STATS_RESPONSE figure."""
    enc = QuicxEncoder(profile)
    layout = load_profile(profile).model.message("MSG_STATS_RESPONSE").layout
    roles = load_profile(profile).model.peer_roles

    async def pump_up(reader, writer):
        while data := await reader.read(1 << 16):
            writer.write(data)
            await writer.drain()
        writer.close()

    async def pump_down(reader, writer):
        dec = QuicxDecoder(profile, roles)
        while data := await reader.read(1 << 16):
            try:
                frames = dec.feed(data)
            except ProtocolError:
                writer.write(data)
                continue
            for m in frames:
                if m.name == "MSG_STATS_RESPONSE":
                    swapped = {f.id: int.from_bytes(m.fields[f.id].to_bytes(f.width, "big"), "little")
                               for f in layout}
                    writer.write(enc.encode(m.name, **swapped))
                else:
                    writer.write(m.raw)
            await writer.drain()
        writer.close()

    async with QuicxServer(profile, port=0) as daemon:
        tasks: set[asyncio.Task] = set()

        async def client(reader, writer):
            up_r, up_w = await asyncio.open_connection("127.0.0.1", daemon.port)
            both = [asyncio.ensure_future(pump_up(reader, up_w)),
                    asyncio.ensure_future(pump_down(up_r, writer))]
            tasks.update(both)
            await asyncio.gather(*both, return_exceptions=True)

        server = await asyncio.start_server(client, "127.0.0.1", 0)
        try:
            yield server.sockets[0].getsockname()[1]
        finally:
            server.close()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


@pytest.mark.asyncio
async def test_daemon_with_little_endian_stats() -> None:
    async def main() -> TargetRun:
        async with little_endian_stats_proxy("quicx/v1") as port:
            return await run_target("quicx", f"127.0.0.1:{port}", profile="quicx/v1",
                                    select=("quicx.stats.*", "quicx.heartbeat.*",
                                            "quicx.producer.*", "quicx.worker.*"))

    run = await main()
    _check_split(run, {"quicx.stats.figures"})


@pytest.mark.asyncio
async def test_parallel_run_gives_the_serial_verdicts(reference_run: TargetRun) -> None:
    """--jobs 8 (cases on the daemon's one task queue exclusive) judges as the serial run."""
    parallel = await run_target("quicx", "embedded", profile=reference_run.profile,
                                jobs=8)
    assert [r.case.id for r in parallel.results] == [r.case.id for r in reference_run.results]
    differ = [f"{s.case.id}: serial {s.verdict}, parallel {p.verdict}: "
              f"{(p.error or '; '.join(c.message for c in p.failed_checks))[:200]}"
              for s, p in zip(reference_run.results, parallel.results) if s.verdict != p.verdict]
    assert not differ, "\n".join(differ)
