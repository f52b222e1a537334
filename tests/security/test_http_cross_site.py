"""Issue 22 item 5, BQ-SAFE-2: the bunqueue HTTP API refuses what a web page in a browser on
the server's machine could send without a CORS preflight, with no token configured (the
default): a POST whose body is not declared JSON (415 ``http_content_type``), a POST or
WebSocket upgrade from a foreign Origin (403 ``http_origin_refused``) and a Host name that is
neither loopback nor configured, as DNS rebinding sends (421 ``http_host_refused``). Clients
that send no Origin (curl, SDKs, the conformance runner) keep working, and so do the server's
own origin and the origins and hosts configured with ``--http-allowed-origin`` /
``--http-allowed-host``. Real aiohttp clients on 127.0.0.1 only."""

from __future__ import annotations

import asyncio
import socket
from typing import Any

import aiohttp
import pytest

from queuewire.reference_server.bunqueue import BunqueueServer, HttpFrontend
from queuewire.spec import load_profile

PROFILE = load_profile("bunqueue/v2")
GUARD = 10.0

pytestmark = pytest.mark.asyncio


def message(name: str, **fields: Any) -> str:
    return PROFILE.model.errors[name].message.format(**fields)


async def waiting(server: BunqueueServer, queue: str) -> int:
    counts = server.engine.handle(None, {"cmd": "GetJobCounts", "queue": queue})
    return counts["counts"]["waiting"]


async def test_text_plain_post_is_refused_with_415_and_creates_no_job():
    """BQ-SAFE-2 / issue 22 item 5: ``POST /queues/q/jobs`` with ``Content-Type: text/plain``
    (a browser's simple request, no preflight) is 415 with the spec's message, and no job is
    created; the same body declared ``application/json`` is accepted."""
    async def go():
        server = BunqueueServer(PROFILE, "127.0.0.1", 0, http_port=0)
        await server.start()
        url = server.http.url
        try:
            async with aiohttp.ClientSession() as http:
                for ctype in ("text/plain", "application/x-www-form-urlencoded",
                              "multipart/form-data; boundary=x"):
                    async with http.post(f"{url}/queues/q/jobs", data=b'{"data": {"x": 1}}',
                                         headers={"Content-Type": ctype}) as r:
                        assert r.status == 415, (ctype, r.status, await r.text())
                        assert await r.json() == {"ok": False,
                                                  "error": message("http_content_type")}
                # a body without any Content-Type is not JSON either
                async with http.post(f"{url}/jobs/x/ack", data=b'{"result": 1}',
                                     skip_auto_headers=("Content-Type",)) as r:
                    assert r.status == 415, r.status
                assert await waiting(server, "q") == 0
                async with http.post(f"{url}/queues/q/jobs", data=b'{"data": {"x": 1}}',
                                     headers={"Content-Type": "application/json; charset=utf-8"}) as r:
                    assert r.status == 200 and (await r.json())["ok"] is True
                assert await waiting(server, "q") == 1
        finally:
            await server.stop()

    await asyncio.wait_for(go(), GUARD)


async def test_foreign_origin_post_is_refused_with_403_own_and_configured_origins_pass():
    """BQ-SAFE-2 / issue 22 item 5: a POST with ``Origin: http://evil.example`` is 403 naming
    the origin, even with a JSON body (fetch with no-cors cannot set it, a form can reach the
    server with any Origin), and creates no job; no Origin, the server's own
    ``http://host:port`` and a configured origin are served."""
    async def go():
        server = BunqueueServer(PROFILE, "127.0.0.1", 0, http_port=0)
        await server.start()
        front: HttpFrontend | None = None
        try:
            async with aiohttp.ClientSession() as http:
                for target in (server.http, None):
                    if target is None:  # the same with origins configured
                        front = HttpFrontend(server, "127.0.0.1", 0,
                                             allowed_origins=["https://dash.example.com"])
                        target = await front.start()
                    for body, ctype in ((b'{"data": 1}', "text/plain"),
                                        (b'{"data": 1}', "application/json")):
                        async with http.post(f"{target.url}/queues/q/jobs", data=body,
                                             headers={"Content-Type": ctype,
                                                      "Origin": "http://evil.example"}) as r:
                            assert r.status == 403, (r.status, await r.text())
                            assert await r.json() == {"ok": False, "error": message(
                                "http_origin_refused", origin="http://evil.example")}
                assert await waiting(server, "q") == 0
                allowed = [(server.http, None), (server.http, server.http.url),
                           (front, front.url), (front, "https://dash.example.com"),
                           (front, f"http://localhost:{front.port}")]
                for target, origin in allowed:
                    headers = {} if origin is None else {"Origin": origin}
                    if origin and "localhost" in origin:  # own: the origin the Host names
                        headers["Host"] = f"localhost:{front.port}"
                    async with http.post(f"{target.url}/queues/q/jobs", json={"data": 1},
                                         headers=headers) as r:
                        assert r.status == 200, (origin, r.status, await r.text())
                # http://localhost:<port> is own only when the request's Host says so
                async with http.post(f"{server.http.url}/queues/q/jobs", json={"data": 1},
                                     headers={"Origin": "http://localhost:1"}) as r:
                    assert r.status == 403
                assert await waiting(server, "q") == len(allowed)
        finally:
            if front is not None:
                await front.stop()
            await server.stop()

    await asyncio.wait_for(go(), GUARD)


async def test_rebinding_host_is_refused_loopback_and_configured_hosts_are_served():
    """BQ-SAFE-2 / issue 22 item 5: ``Host: rebind.evil.example`` (a DNS-rebinding page
    reaching 127.0.0.1) is refused with 421 and the spec's message on every endpoint, a
    pull included; localhost, loopback and address literals and configured names pass."""
    async def go():
        server = BunqueueServer(PROFILE, "127.0.0.1", 0, http_port=0)
        await server.start()
        server.engine.handle(None, {"cmd": "PUSH", "queue": "q", "data": {"secret": 1}})
        front: HttpFrontend | None = None
        try:
            async with aiohttp.ClientSession() as http:
                for path in ("/stats", "/queues/q/jobs", "/health"):
                    async with http.get(f"{server.http.url}{path}",
                                        headers={"Host": f"rebind.evil.example:{server.http.port}"}) as r:
                        assert r.status == 421, (path, r.status)
                        assert await r.json() == {"ok": False, "error": message(
                            "http_host_refused", host="rebind.evil.example")}
                assert await waiting(server, "q") == 1  # the pull was not served
                for host in ("localhost", "LOCALHOST.", "api.localhost", "127.0.0.1",
                             "[::1]", "10.1.2.3"):
                    async with http.get(f"{server.http.url}/stats",
                                        headers={"Host": f"{host}:{server.http.port}"}) as r:
                        assert r.status == 200, (host, r.status)
                async with http.get(f"{server.http.url}/stats",
                                    headers={"Host": "queue.internal.example"}) as r:
                    assert r.status == 421
                front = HttpFrontend(server, "127.0.0.1", 0,
                                     allowed_hosts=["queue.internal.example"])
                await front.start()
                async with http.get(f"{front.url}/stats",
                                    headers={"Host": "queue.internal.example"}) as r:
                    assert r.status == 200
        finally:
            if front is not None:
                await front.stop()
            await server.stop()

    await asyncio.wait_for(go(), GUARD)


async def test_websocket_from_a_foreign_origin_is_refused_at_the_upgrade():
    """BQ-SAFE-2 / issue 22 item 5: a WebSocket upgrade with a foreign Origin (which a
    browser sends without any preflight) is refused with 403 before any command is read, so it
    cannot pull job data; no Origin and the server's own origin are accepted."""
    async def go():
        server = BunqueueServer(PROFILE, "127.0.0.1", 0, http_port=0)
        await server.start()
        server.engine.handle(None, {"cmd": "PUSH", "queue": "q", "data": {"secret": 1}})
        url = server.http.url
        try:
            async with aiohttp.ClientSession() as http:
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await http.ws_connect(f"{url}/ws", origin="http://evil.example")
                assert refused.value.status == 403
                assert await waiting(server, "q") == 1
                for origin in (None, url):
                    ws = await http.ws_connect(f"{url}/ws", origin=origin)
                    await ws.send_json({"cmd": "Ping", "reqId": "p"})
                    reply = await asyncio.wait_for(ws.receive_json(), 5.0)
                    while reply.get("reqId") != "p":
                        reply = await asyncio.wait_for(ws.receive_json(), 5.0)
                    assert reply["ok"] is True
                    await ws.close()
        finally:
            await server.stop()

    await asyncio.wait_for(go(), GUARD)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_serve_bunqueue_takes_allowed_origins_and_hosts():
    """BQ-SAFE-2 / issue 22 item 5: ``queuewire serve bunqueue --http-allowed-origin O
    --http-allowed-host H`` (repeatable) reach the HTTP API of the daemon: O and H are served,
    a foreign origin and host are not."""
    from serve_process import start_serve, stop_serve

    http_port = _free_port()
    proc, _ = await asyncio.to_thread(
        start_serve, "bunqueue", "--http-port", str(http_port),
        "--http-allowed-origin", "https://a.example", "--http-allowed-origin", "https://b.example",
        "--http-allowed-host", "queue.example")
    try:
        async def go():
            url = f"http://127.0.0.1:{http_port}"
            async with aiohttp.ClientSession() as http:
                for _ in range(100):  # the HTTP API starts right after the TCP line
                    try:
                        async with http.get(f"{url}/healthz"):
                            break
                    except aiohttp.ClientConnectionError:
                        await asyncio.sleep(0.05)
                for origin, status in (("https://b.example", 200), ("https://a.example", 200),
                                       ("https://c.example", 403)):
                    async with http.post(f"{url}/queues/q/jobs", json={"data": 1},
                                         headers={"Origin": origin}) as r:
                        assert r.status == status, (origin, r.status)
                for host, status in (("queue.example", 200), ("other.example", 421)):
                    async with http.get(f"{url}/stats", headers={"Host": host}) as r:
                        assert r.status == status, (host, r.status)

        await asyncio.wait_for(go(), GUARD)
    finally:
        await asyncio.to_thread(stop_serve, proc)
