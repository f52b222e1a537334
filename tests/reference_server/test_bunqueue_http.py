"""The bunqueue reference server's HTTP API (BQ-HTTP-1..11) and webhook delivery
(BQ-WEBHOOK-1, BQ-WEBHOOK-3), with a real aiohttp client on 127.0.0.1."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import itertools
import json
import logging
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from queuewire.codecs.bunqueue import FrameDecoder, FrameEncoder
from queuewire.reference_server.bunqueue import (
    BunqueueEngine,
    BunqueueServer,
    EngineConfig,
    HttpFrontend,
    WebhookDelivery,
)
from queuewire.reference_server.bunqueue.http import PROMETHEUS_CONTENT_TYPE, SIGNATURE_HEADER
from queuewire.spec import load_profile

PROFILE = load_profile("bunqueue/v2")
GUARD = 15.0

pytestmark = pytest.mark.asyncio


def message(name: str, **fields: Any) -> str:
    return PROFILE.model.errors[name].message.format(**fields)


async def run(coro):
    return await asyncio.wait_for(coro, GUARD)


class Tcp:
    """A minimal TCP client of the server, replies matched by reqId."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.reader, self.writer = reader, writer
        self.enc, self.dec = FrameEncoder(PROFILE), FrameDecoder(PROFILE)
        self.inbox: list[dict] = []
        self.ids = itertools.count(1)

    @classmethod
    async def open(cls, port: int) -> Tcp:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def call(self, cmd: str, **fields: Any) -> dict:
        req_id = str(next(self.ids))
        self.writer.write(self.enc.encode({"cmd": cmd, **fields, "reqId": req_id}))
        while True:
            for i, msg in enumerate(self.inbox):
                if msg.get("reqId") == req_id:
                    return self.inbox.pop(i)
            data = await asyncio.wait_for(self.reader.read(65536), 5.0)
            assert data, "the server closed the connection"
            self.inbox.extend(self.dec.feed(data))

    async def close(self) -> None:
        self.writer.close()


async def started(**kwargs: Any) -> tuple[BunqueueServer, str]:
    server = BunqueueServer(PROFILE, "127.0.0.1", 0, http_port=0, **kwargs)
    await server.start()
    assert server.http is not None
    return server, server.http.url


# =============================================================================================
# Endpoints
# =============================================================================================
async def test_probes_stats_and_prometheus():
    async def go():
        server, url = await started()
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{url}/health") as r:
                    assert r.status == 200
                    body = await r.json()
                    assert body["ok"] is True and body["status"] == "healthy"
                    assert isinstance(body["memory"]["usageMb"], float)
                    assert body["version"] == server.engine.config.server_version
                for path, status in (("/healthz", "alive"), ("/ready", "ready")):
                    async with http.get(url + path) as r:
                        assert r.status == 200
                        assert (await r.json()) == {"ok": True, "status": status}
                async with http.post(f"{url}/queues/q/jobs", json={"data": {"a": 1}}) as r:
                    assert r.status == 200
                async with http.get(f"{url}/stats") as r:
                    assert r.status == 200
                    body = await r.json()
                    assert body["ok"] is True and body["stats"]["queued"] == 1
                async with http.get(f"{url}/prometheus") as r:
                    assert r.status == 200
                    assert r.headers["Content-Type"] == PROMETHEUS_CONTENT_TYPE
                    text = await r.text()
                    assert "# TYPE" in text and "bunqueue_" in text
                async with http.get(f"{url}/nope") as r:
                    assert r.status == 404
        finally:
            await server.stop()
        assert not server.serving and server.http is None

    await run(go())


async def test_push_pull_get_ack_fail_across_http_and_tcp():
    async def go():
        server, url = await started()
        tcp = await Tcp.open(server.port)
        try:
            async with aiohttp.ClientSession() as http:
                # pushed over HTTP, pulled over TCP
                async with http.post(f"{url}/queues/emails/jobs",
                                     json={"data": {"to": "a"}, "priority": 5}) as r:
                    assert r.status == 200
                    pushed = await r.json()
                assert pushed["ok"] is True and isinstance(pushed["id"], str)
                pulled = await tcp.call("PULL", queue="emails")
                assert pulled["ok"] is True and pulled["job"]["id"] == pushed["id"]
                assert pulled["job"]["data"] == {"to": "a"}
                assert pulled["job"]["priority"] == 5
                # pushed over TCP, pulled over HTTP
                tcp_id = (await tcp.call("PUSH", queue="emails", data={"to": "b"}))["id"]
                async with http.get(f"{url}/queues/emails/jobs") as r:
                    assert r.status == 200
                    body = await r.json()
                assert body["ok"] is True and body["job"]["id"] == tcp_id
                # an empty queue answers job null; a long poll is woken by a TCP push
                async with http.get(f"{url}/queues/other/jobs") as r:
                    assert (await r.json()) == {"ok": True, "job": None}
                poll = asyncio.create_task(http.get(f"{url}/queues/late/jobs?timeout=3000"))
                await asyncio.sleep(0.2)
                late_id = (await tcp.call("PUSH", queue="late", data=1))["id"]
                async with await poll as r:
                    assert (await r.json())["job"]["id"] == late_id
                # GetJob
                async with http.get(f"{url}/jobs/{tcp_id}") as r:
                    assert r.status == 200
                    body = await r.json()
                assert body["ok"] is True and body["job"]["state"] == "active"
                async with http.get(f"{url}/jobs/missing") as r:
                    assert r.status == 404
                    assert (await r.json()) == {"ok": False, "error": message("job_not_found")}
                # ack over HTTP
                async with http.post(f"{url}/jobs/{tcp_id}/ack", json={"result": {"n": 7}}) as r:
                    assert r.status == 200 and (await r.json()) == {"ok": True}
                job = (await tcp.call("GetJob", id=tcp_id))["job"]
                assert job["state"] == "completed" and job["returnvalue"] == {"n": 7}
                async with http.post(f"{url}/jobs/{tcp_id}/ack") as r:
                    assert r.status == 409
                    assert (await r.json())["error"] == message("job_not_processing",
                                                                id=tcp_id)
                async with http.post(f"{url}/jobs/ghost/ack") as r:
                    assert r.status == 404
                # fail over HTTP (the job was pulled over TCP)
                async with http.post(f"{url}/jobs/{pushed['id']}/fail",
                                     json={"error": "boom", "unrecoverable": True}) as r:
                    assert r.status == 200 and (await r.json()) == {"ok": True}
                async with http.get(f"{url}/jobs/{pushed['id']}") as r:
                    job = (await r.json())["job"]
                assert job["state"] == "failed" and job["failedReason"] == "boom"
        finally:
            await tcp.close()
            await server.stop()

    await run(go())


async def test_validation_errors_are_400_with_the_spec_s_message():
    async def go():
        server, url = await started()
        prefix = message("invalid_request", detail="")
        try:
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{url}/queues/bad%20name!/jobs", json={"data": 1}) as r:
                    assert r.status == 400
                    body = await r.json()
                assert body["ok"] is False and body["error"].startswith(prefix)
                assert "/queue" in body["error"]
                async with http.post(f"{url}/queues/q/jobs",
                                     json={"data": 1, "priority": 10**9}) as r:
                    assert r.status == 400
                    body = await r.json()
                assert body["error"].startswith(prefix) and "/priority" in body["error"]
                async with http.post(f"{url}/queues/q/jobs", data=b"{not json",
                                     headers={"Content-Type": "application/json"}) as r:
                    assert r.status == 400
                    assert (await r.json())["error"] == message("invalid_command_format")
                async with http.post(f"{url}/queues/q/jobs", json=[1, 2]) as r:
                    assert r.status == 400
                async with http.get(f"{url}/queues/q/jobs?timeout=soon") as r:
                    assert r.status == 400
                    assert (await r.json())["error"].startswith(prefix)
            stats = server.engine.handle(None, {"cmd": "Stats"})
            assert stats["ok"] is True and stats["stats"]["queued"] == 0  # nothing was added
        finally:
            await server.stop()

    await run(go())


async def test_auth_bearer_token():
    async def go():
        server, url = await started(auth_tokens=["s3cret", "other"])
        try:
            async with aiohttp.ClientSession() as http:
                async with http.get(f"{url}/stats") as r:
                    assert r.status == 401
                    assert (await r.json()) == {"ok": False,
                                                "error": message("not_authenticated")}
                async with http.get(f"{url}/stats",
                                    headers={"Authorization": "Bearer wrong"}) as r:
                    assert r.status == 401
                    assert (await r.json())["error"] == message("invalid_token")
                async with http.post(f"{url}/queues/q/jobs", json={"data": 1},
                                     headers={"Authorization": "Basic s3cret"}) as r:
                    assert r.status == 401
                async with http.get(f"{url}/stats",
                                    headers={"Authorization": "Bearer s3cret"}) as r:
                    assert r.status == 200 and (await r.json())["ok"] is True
                async with http.post(f"{url}/queues/q/jobs", json={"data": 1},
                                     headers={"Authorization": "Bearer other"}) as r:
                    assert r.status == 200
                for probe in ("/healthz", "/ready"):  # Kubernetes probes carry no token
                    async with http.get(url + probe) as r:
                        assert r.status == 200
        finally:
            await server.stop()

    await run(go())


async def test_frontend_on_a_bare_engine_and_no_http_by_default():
    async def go():
        server = BunqueueServer(PROFILE, "127.0.0.1", 0)
        await server.start()
        assert server.http is None
        await server.stop()
        front = await HttpFrontend(BunqueueEngine(PROFILE), "127.0.0.1", 0).start()
        try:
            assert front.port > 0
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{front.url}/queues/q/jobs", json={"data": 2}) as r:
                    job_id = (await r.json())["id"]
                async with http.get(f"{front.url}/queues/q/jobs") as r:
                    assert (await r.json())["job"]["id"] == job_id
        finally:
            await front.stop()

    await run(go())


# =============================================================================================
# Webhooks
# =============================================================================================
async def receiver() -> tuple[web.AppRunner, str, list[tuple[dict, bytes]]]:
    got: list[tuple[dict, bytes]] = []

    async def hook(request: web.Request) -> web.Response:
        got.append((dict(request.headers), await request.read()))
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post("/hook", hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    return runner, f"http://127.0.0.1:{port}/hook", got


async def until(predicate, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    end = loop.time() + timeout
    while not predicate():
        assert loop.time() < end, "timed out"
        await asyncio.sleep(0.02)


async def test_webhook_is_delivered_with_a_valid_hmac_signature():
    async def go():
        rx, hook_url, got = await receiver()
        engine = BunqueueEngine(PROFILE, config=EngineConfig(allow_private_webhooks=True))
        server = BunqueueServer(engine=engine, host="127.0.0.1", port=0, http_port=0)
        await server.start()
        tcp = await Tcp.open(server.port)
        try:
            added = await tcp.call("AddWebhook", url=hook_url, events=["job.pushed"],
                                   secret="k3y")
            assert added["ok"] is True, added
            async with aiohttp.ClientSession() as http:
                async with http.post(f"{server.http.url}/queues/hq/jobs",
                                     json={"data": {"x": 1}}) as r:
                    job_id = (await r.json())["id"]
            await until(lambda: got)
            headers, body = got[0]
            expected = hmac.new(b"k3y", body, hashlib.sha256).hexdigest()
            assert headers[SIGNATURE_HEADER] == expected
            assert headers["Content-Type"] == "application/json"
            payload = json.loads(body)
            assert payload["event"] == "job.pushed" and payload["jobId"] == job_id
            assert payload["queue"] == "hq"
            listed = await tcp.call("ListWebhooks")

            def success() -> bool:
                hooks = engine.handle(None, {"cmd": "ListWebhooks"})["data"]["webhooks"]
                return hooks[0]["successCount"] == 1

            await until(success)
            assert listed["ok"] is True
        finally:
            await tcp.close()
            await server.stop()
            await rx.cleanup()

    await run(go())


async def test_private_targets_are_refused_at_delivery_without_the_opt_in(caplog):
    caplog.set_level(logging.WARNING, "queuewire.reference_server.bunqueue.webhook_delivery")

    async def go():
        rx, hook_url, got = await receiver()
        engine = BunqueueEngine(PROFILE)  # no opt-in
        front = await HttpFrontend(engine, "127.0.0.1", 0).start()
        try:
            port = hook_url.split(":")[2].split("/")[0]
            for url in (hook_url, f"http://localhost:{port}/hook",
                        f"http://[::1]:{port}/hook"):
                delivery = WebhookDelivery("wh-x", url, "job.pushed", {"event": "job.pushed"},
                                           "k")
                assert await front.webhooks.deliver(delivery) is False, url
            # AddWebhook refuses the loopback target up front as well (BQ-WEBHOOK-1)
            refused = engine.handle(None, {"cmd": "AddWebhook", "url": hook_url,
                                           "events": ["job.pushed"]})
            assert refused["ok"] is False
            await asyncio.sleep(0.1)
            assert got == []
            refusals = [r for r in caplog.records if "not delivered" in r.getMessage()]
            assert len(refusals) == 3  # refused by the address check, not a failed connection
        finally:
            await front.stop()
            await rx.cleanup()

    await run(go())


# =============================================================================================
# Server-Sent Events (BQ-HTTP-13) and WebSocket (BQ-HTTP-12)
# =============================================================================================
class Sse:
    """Reads one text/event-stream response block by block."""

    def __init__(self, response: aiohttp.ClientResponse):
        self.response = response

    async def block(self) -> dict[str, str]:
        """The next block's fields (a comment line is kept under ``":"``); {} at the end."""
        fields: dict[str, str] = {}
        while True:
            line = await asyncio.wait_for(self.response.content.readline(), 5.0)
            if not line:
                return fields
            text = line.decode().rstrip("\n")
            if not text:
                if fields:
                    return fields
                continue
            name, _, value = text.partition(":")
            fields[name or ":"] = value[1:] if value.startswith(" ") else value

    async def event(self) -> tuple[str, dict]:
        """The next named event (heartbeats skipped) as (name, data)."""
        while True:
            fields = await self.block()
            assert fields, "the stream ended"
            if "event" in fields:
                return fields["event"], json.loads(fields["data"])

    async def until(self, name: str, job_id: str) -> list[tuple[str, dict]]:
        """Every event up to and including ``name`` about ``job_id``."""
        seen = []
        while True:
            seen.append(await self.event())
            if seen[-1][0] == name and seen[-1][1].get("jobId") == job_id:
                return seen


async def open_sse(http: aiohttp.ClientSession, url: str, **kwargs: Any) -> Sse:
    response = await http.get(url, **kwargs)
    assert response.status == 200
    assert response.content_type == "text/event-stream"
    sse = Sse(response)
    hello = await sse.block()
    assert json.loads(hello["data"])["connected"] is True and int(hello["retry"]) > 0
    return sse


async def test_sse_streams_job_events_filtered_by_queue_and_heartbeats():
    async def go():
        server, url = await started()
        tcp = await Tcp.open(server.port)
        try:
            async with aiohttp.ClientSession() as http:
                every = await open_sse(http, f"{url}/events")
                only_a = await open_sse(http, f"{url}/events/queues/a")
                assert server.http.event_streams == 2
                b_id = (await tcp.call("PUSH", queue="b", data={}))["id"]
                a_id = (await tcp.call("PUSH", queue="a", data={}))["id"]
                pulled = await tcp.call("PULL", queue="a")
                assert pulled["job"]["id"] == a_id
                assert (await tcp.call("ACK", id=a_id, result={"r": 1}))["ok"] is True
                seen = await every.until("job:completed", a_id)
                names = [(name, data["jobId"]) for name, data in seen]
                assert ("job:waiting", b_id) in names and ("job:waiting", a_id) in names
                assert names.index(("job:waiting", a_id)) < names.index(("job:completed",
                                                                          a_id))
                assert seen[-1][1]["queue"] == "a" and isinstance(seen[-1][1]["timestamp"],
                                                                  float)
                filtered = await only_a.until("job:completed", a_id)
                assert {data["queue"] for _, data in filtered} == {"a"}  # b came first
                assert ("job:waiting", a_id) in [(n, d["jobId"]) for n, d in filtered]
                # a quiet stream gets heartbeat comments
                server.http.heartbeat = 0.05
                async with http.get(f"{url}/events") as r:
                    sse = Sse(r)
                    await sse.block()  # retry + connected
                    assert ":" in await sse.block()
                every.response.close()
                only_a.response.close()
                await until(lambda: server.http.event_streams == 0)  # nothing left behind
        finally:
            await tcp.close()
            await server.stop()

    await run(go())


async def test_stopping_the_server_ends_open_streams_and_websockets():
    async def go():
        server, url = await started()
        async with aiohttp.ClientSession() as http:
            sse = await open_sse(http, f"{url}/events")
            ws = await http.ws_connect(f"{url}/ws")
            assert server.http.event_streams == 2
            await server.stop()
            assert await sse.block() == {}  # the response ended
            closing = await asyncio.wait_for(ws.receive(), 5.0)
            assert closing.type in (aiohttp.WSMsgType.CLOSE, aiohttp.WSMsgType.CLOSED)
            sse.response.close()

    await run(go())


class Ws:
    """A /ws client: replies matched by reqId; pushed events kept apart."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse):
        self.ws, self.events, self.replies = ws, [], []
        self.ids = itertools.count(1)

    async def next(self) -> dict:
        msg = await asyncio.wait_for(self.ws.receive(), 5.0)
        assert msg.type == aiohttp.WSMsgType.TEXT, msg
        body = json.loads(msg.data)
        if "ok" not in body:
            self.events.append(body)
        return body

    async def reply(self, req_id: Any) -> dict:
        while True:
            for i, body in enumerate(self.replies):
                if body.get("reqId") == req_id:
                    return self.replies.pop(i)
            body = await self.next()
            if "ok" in body:
                self.replies.append(body)

    async def call(self, cmd: str, **fields: Any) -> dict:
        req_id = f"w{next(self.ids)}"
        await self.ws.send_json({"cmd": cmd, **fields, "reqId": req_id})
        return await self.reply(req_id)

    async def raw(self, text: str) -> dict:
        await self.ws.send_str(text)
        while True:
            body = await self.next()
            if "ok" in body:
                return body


async def test_websocket_speaks_the_tcp_commands_and_pushes_events():
    async def go():
        server, url = await started()
        tcp = await Tcp.open(server.port)
        try:
            async with aiohttp.ClientSession() as http:
                ws = Ws(await http.ws_connect(f"{url}/ws"))
                pushed = await ws.call("PUSH", queue="w", data={"x": 1}, priority=3)
                assert pushed["ok"] is True and pushed["reqId"] == "w1"
                got = await ws.call("GetJob", id=pushed["id"])
                assert got["ok"] is True and got["job"]["data"] == {"x": 1}
                assert got["job"]["priority"] == 3
                # the same gate as a TCP frame
                assert await ws.raw("not json") == {
                    "ok": False, "error": message("invalid_command_format")}
                assert await ws.raw("[1, 2]") == {"ok": False,
                                                  "error": message("invalid_command")}
                assert await ws.call("Nope") == {
                    "ok": False, "error": message("unknown_command", cmd="Nope"),
                    "reqId": "w3"}
                bad = await ws.call("PUSH", data={})  # no queue
                assert bad["ok"] is False and bad["reqId"] == "w4"
                prefix = message("invalid_request", detail="").strip()
                assert bad["error"].startswith(prefix), bad
                # a long poll is parked and woken by a TCP push
                await ws.ws.send_json({"cmd": "PULL", "queue": "late", "timeout": 4000,
                                       "reqId": "poll"})
                await until(lambda: server.http._room.parked == 1)
                late_id = (await tcp.call("PUSH", queue="late", data={}))["id"]
                polled = await ws.reply("poll")
                assert polled["ok"] is True and polled["job"]["id"] == late_id
                # events are pushed as {eventType, queue, jobId, timestamp}
                while not any(e.get("jobId") == late_id for e in ws.events):
                    await ws.next()
                event = next(e for e in ws.events if e.get("jobId") == late_id)
                assert event["eventType"] == "waiting" and event["queue"] == "late"
                # closing the WebSocket returns the job it pulled to waiting (as TCP)
                await ws.ws.close()
                await until(lambda: server.http.event_streams == 0)
                state = await tcp.call("GetState", id=late_id)
                assert state["state"] == "waiting"
        finally:
            await tcp.close()
            await server.stop()

    await run(go())


async def test_websocket_and_events_need_the_bearer_token():
    async def go():
        server, url = await started(auth_tokens=["s3cret"])
        try:
            async with aiohttp.ClientSession() as http:
                for path in ("/events", "/events/queues/q"):
                    async with http.get(url + path) as r:
                        assert r.status == 401
                        assert (await r.json())["error"] == message("not_authenticated")
                for headers in ({}, {"Authorization": "Bearer wrong"}):
                    try:
                        await http.ws_connect(f"{url}/ws", headers=headers)
                    except aiohttp.WSServerHandshakeError as exc:
                        assert exc.status == 401
                    else:
                        raise AssertionError("the upgrade was accepted without a token")
                good = {"Authorization": "Bearer s3cret"}
                sse = await open_sse(http, f"{url}/events", headers=good)
                sse.response.close()
                ws = Ws(await http.ws_connect(f"{url}/ws", headers=good))
                assert (await ws.call("PUSH", queue="q", data={}))["ok"] is True
                assert await ws.call("Auth", token="wrong") == {
                    "ok": False, "error": message("invalid_token"), "reqId": "w2"}
                assert (await ws.call("Auth", token="s3cret"))["ok"] is True
                await ws.ws.close()
        finally:
            await server.stop()

    await run(go())


async def test_websocket_subscribe_events_where_the_profile_has_them():
    profile = load_profile("bunqueue/2.9.5")

    async def go():
        server = BunqueueServer(profile, "127.0.0.1", 0, http_port=0)
        await server.start()
        try:
            async with aiohttp.ClientSession() as http:
                ws = Ws(await http.ws_connect(f"{server.http.url}/ws"))
                assert (await ws.call("SubscribeEvents", queue="s"))["ok"] is True
                job_id = (await ws.call("PUSH", queue="s", data={}))["id"]
                while not any(e.get("type") == "event" for e in ws.events):
                    await ws.next()
                frame = next(e for e in ws.events if e.get("type") == "event")
                assert frame["event"]["eventType"] == "pushed"
                assert frame["event"]["jobId"] == job_id and "reqId" not in frame
                await ws.ws.close()
        finally:
            await server.stop()

    await run(go())
