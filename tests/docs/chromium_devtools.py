"""Measure a page's layout in headless Chromium through the DevTools protocol.

``--dump-dom`` gives the DOM after the page's scripts ran, not where things ended up on the
screen: how tall a packet diagram's rows are drawn depends on the width the page gives the
SVG. :func:`evaluate` opens a page in a window of a given size, waits until a JavaScript
condition holds (the diagrams are drawn) and returns the value of a JavaScript expression,
computed by the browser against the laid-out page (``getBoundingClientRect``).

The client is aiohttp's WebSocket client (aiohttp is a dependency of queuewire) speaking
the DevTools protocol's JSON messages: ``Page.navigate`` and ``Runtime.evaluate``. Chromium
runs with ``--remote-debugging-port=0`` and says its port on stderr, which goes to a file
that this module reads (a pipe nobody drains could fill and stall the browser).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import aiohttp

LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


class DevToolsError(AssertionError):
    """Chromium did not start, did not answer, or the page's condition never held."""


async def _call(ws: aiohttp.ClientWebSocketResponse, ids: itertools.count, method: str,
                **params: Any) -> dict:
    msg_id = next(ids)
    await ws.send_str(json.dumps({"id": msg_id, "method": method, "params": params}))
    while True:
        reply = json.loads((await ws.receive(timeout=60)).data)
        if reply.get("id") == msg_id:
            if "error" in reply:
                raise DevToolsError(f"{method}: {reply['error']}")
            return reply["result"]


async def _value(ws, ids, expression: str) -> Any:
    result = await _call(ws, ids, "Runtime.evaluate", expression=expression,
                         returnByValue=True, awaitPromise=True)
    if "exceptionDetails" in result:
        raise DevToolsError(f"{expression[:80]}…: {result['exceptionDetails']}")
    return result["result"].get("value")


async def _evaluate(port: int, url: str, ready: str, expression: str, timeout: float) -> Any:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/json/list") as resp:
            targets = await resp.json()
        page = next(t for t in targets if t.get("type") == "page")
        async with http.ws_connect(page["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            ids = itertools.count(1)
            await _call(ws, ids, "Page.navigate", url=url)
            loaded = (f"location.href === {json.dumps(url)} && document.readyState === "
                      f"'complete' && ({ready})")  # not about:blank's answer
            deadline = time.monotonic() + timeout
            while not await _value(ws, ids, loaded):
                if time.monotonic() > deadline:
                    raise DevToolsError(f"{url}: `{ready}` did not hold within {timeout:.0f} s")
                await asyncio.sleep(0.2)
            return await _value(ws, ids, expression)


def evaluate(chromium: str, url: str, *, ready: str, expression: str, profile_dir: Path,
             window: tuple[int, int] = (1280, 900), timeout: float = 60.0) -> Any:
    """The value of ``expression`` on ``url`` once ``ready`` (a JavaScript expression) is
    true, the page laid out in a ``window`` (width, height) of CSS pixels."""
    log = profile_dir / "chromium.log"
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
             "--hide-scrollbars", "--no-first-run", "--remote-debugging-port=0",
             f"--window-size={window[0]},{window[1]}", f"--user-data-dir={profile_dir}",
             "about:blank"], stdout=subprocess.DEVNULL, stderr=err)
    try:
        deadline = time.monotonic() + 30
        while (match := LISTENING.search(log.read_text(errors="replace"))) is None:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise DevToolsError("chromium did not open its DevTools port:\n"
                                    + log.read_text(errors="replace")[-3000:])
            time.sleep(0.05)
        port = int(re.search(r":(\d+)/", match.group(1)).group(1))
        return asyncio.run(_evaluate(port, url, ready, expression, timeout))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=5)
