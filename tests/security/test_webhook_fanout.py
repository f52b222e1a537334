"""Issue 22 item 7 (BQ-SAFE-1): webhooks are bounded. AddWebhook refuses a hook beyond
``safeguards.webhooks_per_queue`` for its queue (or the all-queues scope) and beyond
``safeguards.max_webhooks`` on the server (``webhook_limit_reached``); deliveries go through
one queue per hook (at most ``webhook_pending`` waiting, the oldest dropped with a log line)
and at most ``webhook_host_concurrency`` are in progress per host, so a tarpit host delays
only its own hooks. Issue 22 item 11 (part): a delivery's log lines name the webhook id and
``scheme://host:port`` only, never the URL's userinfo, path or query.

Webhook endpoints are local servers on 127.0.0.1 (reached as ``127.0.0.1`` or as
``localhost``, two host names for the per-host bound), delivered to through the engine's
``allow_private_webhooks`` test seam, as tests/reference_server/test_bunqueue_http.py does.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any

import pytest
from aiohttp import web

from queuewire.reference_server.bunqueue import BunqueueEngine, BunqueueServer, EngineConfig
from queuewire.spec import load_profile

PROFILE = load_profile("bunqueue/v2")
SAFE = PROFILE.model.safeguards
GUARD = 10.0

pytestmark = pytest.mark.asyncio


def message(name: str, **fields: Any) -> str:
    return PROFILE.model.errors[name].message.format(**fields)


class Tarpit:
    """A local HTTP endpoint that accepts connections and never answers; it counts the
    connections open at once."""

    def __init__(self) -> None:
        self.open = 0
        self.peak = 0
        self.accepted = 0
        self.server: asyncio.AbstractServer | None = None
        self.writers: list[asyncio.StreamWriter] = []

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._conn, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _conn(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.open += 1
        self.accepted += 1
        self.peak = max(self.peak, self.open)
        self.writers.append(writer)
        try:
            while await reader.read(65536):
                pass
        finally:
            self.open -= 1

    async def stop(self) -> None:
        for writer in self.writers:
            writer.transport.abort()
        if self.server is not None:
            self.server.close()


async def receiver() -> tuple[web.AppRunner, int, list[float]]:
    """A local endpoint that answers 200 at once; it records when each POST arrived."""
    got: list[float] = []

    async def hook(request: web.Request) -> web.Response:
        await request.read()
        got.append(time.monotonic())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, site._server.sockets[0].getsockname()[1], got


async def until(predicate, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > end:
            return False
        await asyncio.sleep(0.01)
    return True


def add_hook(engine: BunqueueEngine, url: str, queue: str | None = None) -> dict:
    req = {"cmd": "AddWebhook", "url": url, "events": ["job.pushed"]}
    if queue is not None:
        req["queue"] = queue
    return engine.handle(None, req)


async def test_a_tarpit_host_delays_only_its_own_hooks():
    """Issue 22 item 7: 16 hooks on a tarpit host plus one on another host: each PUSH's
    delivery to the legitimate hook arrives well under a second after the PUSH (the second
    PUSH's too, while the tarpit holds the first's), and the tarpit never has more than
    ``webhook_host_concurrency`` connections open at once."""
    per_queue, per_host = SAFE["webhooks_per_queue"], SAFE["webhook_host_concurrency"]

    async def go():
        tarpit = Tarpit()
        tarpit_port = await tarpit.start()
        rx, rx_port, got = await receiver()
        engine = BunqueueEngine(PROFILE, config=EngineConfig(allow_private_webhooks=True))
        server = BunqueueServer(engine=engine, host="127.0.0.1", port=0, http_port=0)
        await server.start()
        try:
            for i in range(per_queue):
                assert add_hook(engine, f"http://127.0.0.1:{tarpit_port}/t{i}", "q")["ok"]
            assert add_hook(engine, f"http://localhost:{rx_port}/hook")["ok"]  # all queues
            for n in (1, 2):
                pushed_at = time.monotonic()
                assert engine.handle(None, {"cmd": "PUSH", "queue": "q", "data": {}})["ok"]
                arrived = await until(lambda n=n: len(got) >= n, 2.0)
                assert arrived, f"PUSH {n}: the legitimate hook had nothing after 2 s"
                late = got[n - 1] - pushed_at
                assert late < 0.5, f"PUSH {n}: the legitimate delivery arrived {late:.2f} s late"
            await until(lambda: tarpit.accepted >= per_host, 2.0)
            await asyncio.sleep(0.3)  # more connections would have been opened by now
            assert tarpit.accepted >= per_host, tarpit.accepted
            assert tarpit.peak <= per_host, (
                f"{tarpit.peak} connections open at once to the tarpit host")
        finally:
            await server.stop()
            await tarpit.stop()
            await rx.cleanup()

    await asyncio.wait_for(go(), GUARD)


async def test_add_webhook_beyond_the_per_queue_and_server_bounds_is_refused():
    """Issue 22 item 7: the 17th hook on one queue (and on the all-queues scope) and the
    257th on the server are refused with ``webhook_limit_reached``; a refused hook is not
    kept, and removing one makes room again."""
    per_queue, total = SAFE["webhooks_per_queue"], SAFE["max_webhooks"]
    engine = BunqueueEngine(PROFILE)
    url = "https://hooks.example.com/x"
    for scope in ("q", None):
        for _ in range(per_queue):
            assert add_hook(engine, url, scope)["ok"] is True
        assert add_hook(engine, url, scope) == {
            "ok": False, "error": message("webhook_limit_reached", max=per_queue)}
    n = 2 * per_queue
    queue = 0
    while n < total:
        queue += 1
        for _ in range(min(per_queue, total - n)):
            assert add_hook(engine, url, f"q{queue}")["ok"] is True
            n += 1
    listed = engine.handle(None, {"cmd": "ListWebhooks"})["data"]["webhooks"]
    assert len(listed) == total
    assert add_hook(engine, url, "fresh") == {
        "ok": False, "error": message("webhook_limit_reached", max=total)}
    assert engine.handle(None, {"cmd": "RemoveWebhook", "webhookId": listed[0]["id"]})["ok"]
    assert add_hook(engine, url, "fresh")["ok"] is True


async def test_a_hook_s_pending_deliveries_are_bounded_and_drops_are_logged(caplog):
    """Issue 22 item 7: a burst of ``webhook_pending + 200`` deliveries keeps at most
    ``webhook_pending`` queued per hook (the oldest 200 are dropped, for the answering hook as
    for the one whose endpoint never answers), the drops are logged in a warning or two per
    hook, not one per drop, and the answering hook, on another host, delivers its queue and
    then the next PUSH promptly while the other hook's backlog waits."""
    caplog.set_level(logging.INFO, "queuewire.reference_server.bunqueue")
    pending = SAFE["webhook_pending"]

    async def go():
        tarpit = Tarpit()
        tarpit_port = await tarpit.start()
        rx, rx_port, got = await receiver()
        engine = BunqueueEngine(PROFILE, config=EngineConfig(allow_private_webhooks=True))
        server = BunqueueServer(engine=engine, host="127.0.0.1", port=0, http_port=0)
        await server.start()
        try:
            slow = add_hook(engine, f"http://127.0.0.1:{tarpit_port}/t", "q")["data"]
            fast = add_hook(engine, f"http://localhost:{rx_port}/hook", "q")["data"]
            for _ in range(pending + 200):  # one burst: taken by the dispatcher at once
                engine.handle(None, {"cmd": "PUSH", "queue": "q", "data": {}})
            assert await until(lambda: len(got) >= pending, 5.0), \
                f"{len(got)} of {pending} delivered to the answering hook after 5 s"
            await asyncio.sleep(0.1)
            assert len(got) == pending, f"{len(got)} delivered of a burst over the bound"
            queued = server.http.webhooks.pending(slow["webhookId"])
            assert pending - SAFE["webhook_host_concurrency"] <= queued <= pending, queued
            for hook in (slow, fast):
                drops = [r for r in caplog.records
                         if r.levelno >= logging.WARNING and "drop" in r.getMessage()
                         and hook["webhookId"] in r.getMessage()]
                assert drops, f"no log line for the dropped deliveries of {hook['url']}"
                assert len(drops) <= 2, f"{len(drops)} log lines: one per drop floods the log"
            pushed_at = time.monotonic()
            engine.handle(None, {"cmd": "PUSH", "queue": "q", "data": {}})
            assert await until(lambda: len(got) > pending, 1.0), "the next PUSH was held up"
            assert got[-1] - pushed_at < 0.5
        finally:
            await server.stop()
            await tarpit.stop()
            await rx.cleanup()

    await asyncio.wait_for(go(), GUARD)


async def test_webhook_log_lines_carry_no_url_credentials_or_query(caplog):
    """Issue 22 item 11 (part): a failed delivery to ``http://user:pass@host/x?token=s`` is
    logged with the webhook id and ``http://host:port`` only: no record (message or
    exception text) contains the user, the password, the path or the token."""
    caplog.set_level(logging.DEBUG)
    with socket.socket() as s:  # a port nothing listens on: the delivery fails at once
        s.bind(("127.0.0.1", 0))
        closed_port = s.getsockname()[1]

    async def go():
        engine = BunqueueEngine(PROFILE, config=EngineConfig(allow_private_webhooks=True))
        server = BunqueueServer(engine=engine, host="127.0.0.1", port=0, http_port=0)
        await server.start()
        try:
            url = f"http://alice:pa55w0rd@127.0.0.1:{closed_port}/x-path?token=s3cr3t"
            hook = add_hook(engine, url)["data"]["webhookId"]
            engine.handle(None, {"cmd": "PUSH", "queue": "q", "data": {}})

            def failed() -> bool:
                hooks = engine.handle(None, {"cmd": "ListWebhooks"})["data"]["webhooks"]
                return hooks[0]["failureCount"] >= 1

            assert await until(failed, 5.0), "the delivery did not fail"
            await asyncio.sleep(0.05)
            texts = [r.getMessage() + (caplog.text if r.exc_info else "") for r in caplog.records]
            about = [t for t in texts if hook in t]
            assert about, "no log line names the failed webhook"
            assert any(f"http://127.0.0.1:{closed_port}" in t for t in about), about
            for text in texts:
                for secret in ("alice", "pa55w0rd", "s3cr3t", "token=", "x-path"):
                    assert secret not in text, f"{secret!r} logged: {text!r}"
        finally:
            await server.stop()

    await asyncio.wait_for(go(), GUARD)
