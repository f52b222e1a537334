"""Webhook delivery for the bunqueue HTTP frontend: :class:`WebhookDispatcher`.

The engine queues what should be POSTed (``engine.webhook_deliveries()``, drained here when
:meth:`WebhookDispatcher.wake` is called, at least every ``WEBHOOK_POLL`` seconds) and is told
each outcome (``engine.webhook_result(id, ok)``). Each payload is POSTed as JSON, with
``X-Webhook-Signature`` (the hex HMAC-SHA256 of the exact body) when the hook has a secret
(BQ-WEBHOOK-3); redirects are not followed.

Bounds (BQ-SAFE-1, issue 22 item 7; the values are the profile's ``safeguards``). One hook on a
slow or silent host ("tarpit") must delay only its own deliveries, and a dead endpoint must
cost bounded memory:

* one delivery queue per hook, drained by one task of that hook while it has deliveries
  (deliveries of a hook go out one at a time, in order); at most ``webhook_pending`` wait in
  it, and beyond that the oldest is dropped, with one warning when a hook starts dropping and
  one with the count when its queue has drained;
* at most ``webhook_host_concurrency`` deliveries in progress at once per host name (the
  URL's host as written, lower-cased), the others of that host waiting their turn in order,
  so the connections a tarpit host gets are bounded and other hosts' deliveries never wait
  behind it;
* the HTTP client's own connection limit is ``max_webhooks``, which the two bounds above
  never reach (at most one delivery per hook is in progress, and AddWebhook refuses hooks
  beyond ``max_webhooks``), so no host can take the slots another needs; each delivery has
  ``WEBHOOK_TIMEOUT`` seconds in all.

Targets (BQ-WEBHOOK-1, against DNS rebinding): unless the engine's config sets
``allow_private_webhooks``, a literal address is checked before the POST and a name by a
resolver that refuses the whole name when any address it resolves to is refused
(``engine.webhook_address_error``), so the connection only ever goes to checked addresses.

Logging (issue 22 item 11): a hook's URL may carry credentials (``http://user:pass@h/x?t=s``),
so a log line names the webhook id and ``scheme://host:port`` only
(:func:`~.webhook_urls.webhook_target`), and a failure's reason is built from its kind and
OS error, never from the exception's text (aiohttp's can quote the URL).
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import socket
import traceback
import urllib.parse
from collections import deque
from dataclasses import dataclass, field

import aiohttp
from aiohttp.abc import AbstractResolver, ResolveResult
from aiohttp.resolver import DefaultResolver
from yarl import URL

from .engine import BunqueueEngine
from .webhook_urls import WebhookDelivery

__all__ = ["SIGNATURE_HEADER", "WEBHOOK_TIMEOUT", "CheckedResolver", "WebhookDispatcher",
           "WebhookRefused"]

log = logging.getLogger("queuewire.reference_server.bunqueue.webhook_delivery")
SIGNATURE_HEADER = "X-Webhook-Signature"
WEBHOOK_TIMEOUT = 10.0       # seconds per delivery, connection included
WEBHOOK_POLL = 0.05          # seconds between checks of the engine's delivery backlog


class WebhookRefused(OSError):
    """A webhook target resolved to an address BQ-WEBHOOK-1 forbids."""


class CheckedResolver(AbstractResolver):
    """Resolves with the default resolver and refuses a name any of whose addresses the
    engine refuses, so that the connector only connects to checked addresses."""

    def __init__(self, engine: BunqueueEngine):
        self._engine = engine
        self._inner = DefaultResolver()

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        results = await self._inner.resolve(host, port, family)
        for result in results:
            error = self._engine.webhook_address_error(result["host"])
            if error:
                raise WebhookRefused(f"webhook host {host} resolves to {result['host']}: {error}")
        return results

    async def close(self) -> None:
        await self._inner.close()


@dataclass(eq=False)
class _HookQueue:
    """One hook's pending deliveries, the task draining them, and how many were dropped since
    it last drained."""

    deliveries: deque[WebhookDelivery] = field(default_factory=deque)
    worker: asyncio.Task | None = None
    dropped: int = 0


@dataclass(eq=False)
class _HostGate:
    """The delivery slots of one host, how many deliveries hold one (``active``) and how many
    hold or wait for one (``users``; the gate is forgotten when none does)."""

    slots: asyncio.Semaphore
    users: int = 0
    active: int = 0


def _ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]"))
    except ValueError:
        return False
    return True


def _host_key(url: str) -> str:
    try:
        return (urllib.parse.urlsplit(url.strip()).hostname or "").lower()
    except ValueError:
        return ""


def _reason(exc: BaseException) -> str:
    """Why a delivery failed, without the exception's text (which may quote the URL)."""
    if isinstance(exc, TimeoutError):
        return f"no answer within {WEBHOOK_TIMEOUT:g} s"
    if isinstance(exc, aiohttp.ClientConnectorError):
        os_error = exc.os_error
        return f"cannot connect: {os_error.strerror or type(os_error).__name__}"
    if isinstance(exc, aiohttp.ClientResponseError):
        return f"{type(exc).__name__} (HTTP {exc.status})"
    if isinstance(exc, OSError) and exc.strerror:
        return f"{type(exc).__name__}: {exc.strerror}"
    return type(exc).__name__


class WebhookDispatcher:
    """Delivers an engine's webhooks within the bounds above; ``start`` and ``stop`` run in
    the frontend's event loop."""

    def __init__(self, engine: BunqueueEngine):
        self.engine = engine
        safeguards = engine.profile.model.safeguards
        self.pending_limit = int(safeguards["webhook_pending"])
        self.host_concurrency = int(safeguards["webhook_host_concurrency"])
        self._connection_limit = int(safeguards["max_webhooks"])
        self._queues: dict[str, _HookQueue] = {}
        self._hosts: dict[str, _HostGate] = {}
        self._session: aiohttp.ClientSession | None = None
        self._loop_task: asyncio.Task | None = None
        self._wake: asyncio.Event | None = None

    async def start(self) -> None:
        self._wake = asyncio.Event()
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(resolver=CheckedResolver(self.engine),
                                           use_dns_cache=False, limit=self._connection_limit),
            timeout=aiohttp.ClientTimeout(total=WEBHOOK_TIMEOUT))
        self._loop_task = asyncio.create_task(self._run(), name="bunqueue-webhooks")

    async def stop(self) -> None:
        tasks = [q.worker for q in self._queues.values() if q.worker is not None]
        if self._loop_task is not None:
            tasks.append(self._loop_task)
        self._loop_task = None
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._queues.clear()
        self._wake = None
        if self._session is not None:
            await self._session.close()
            self._session = None

    def wake(self) -> None:
        """Take the engine's new deliveries now rather than at the next poll."""
        if self._wake is not None:
            self._wake.set()

    def pending(self, webhook_id: str) -> int:
        """Deliveries of one hook waiting in its queue (not counting one in progress)."""
        queue = self._queues.get(webhook_id)
        return len(queue.deliveries) if queue is not None else 0

    def in_progress(self, host: str) -> int:
        """Deliveries to one host name holding a slot now."""
        gate = self._hosts.get(host.lower())
        return gate.active if gate is not None else 0

    # -- the queues
    async def _run(self) -> None:
        wake = self._wake
        assert wake is not None
        while True:
            try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow the cancel
                async with asyncio.timeout(WEBHOOK_POLL):  # of stop() (the loop never ended)
                    await wake.wait()
            except TimeoutError:
                pass
            wake.clear()
            for delivery in self.engine.webhook_deliveries():
                self._enqueue(delivery)

    def _enqueue(self, delivery: WebhookDelivery) -> None:
        queue = self._queues.get(delivery.webhook_id)
        if queue is None:
            queue = self._queues[delivery.webhook_id] = _HookQueue()
        if len(queue.deliveries) >= self.pending_limit:
            queue.deliveries.popleft()
            queue.dropped += 1
            if queue.dropped == 1:
                log.warning("webhook %s to %s: more than %d deliveries pending, dropping the "
                            "oldest", delivery.webhook_id, delivery.target, self.pending_limit)
        queue.deliveries.append(delivery)
        if queue.worker is None:
            queue.worker = asyncio.create_task(self._drain(delivery.webhook_id, queue),
                                               name=f"webhook-{delivery.webhook_id}")

    async def _drain(self, webhook_id: str, queue: _HookQueue) -> None:
        target = queue.deliveries[0].target
        try:
            while queue.deliveries:
                delivery = queue.deliveries.popleft()
                target = delivery.target
                await self.deliver(delivery)
        finally:
            queue.worker = None
            if queue.dropped:
                log.warning("webhook %s to %s: %d deliveries dropped (more than %d pending)",
                            webhook_id, target, queue.dropped, self.pending_limit)
                queue.dropped = 0
            if not queue.deliveries and self._queues.get(webhook_id) is queue:
                del self._queues[webhook_id]

    # -- one delivery
    async def deliver(self, delivery: WebhookDelivery) -> bool:
        """POST one delivery once a slot of its host is free; record and answer whether it
        succeeded."""
        key = _host_key(delivery.url)
        gate = self._hosts.get(key)
        if gate is None:
            gate = self._hosts[key] = _HostGate(asyncio.Semaphore(self.host_concurrency))
        gate.users += 1
        try:
            async with gate.slots:
                gate.active += 1
                try:
                    ok = await self._attempt(delivery)
                finally:
                    gate.active -= 1
        finally:
            gate.users -= 1
            if gate.users == 0 and self._hosts.get(key) is gate:
                del self._hosts[key]
        self.engine.webhook_result(delivery.webhook_id, ok)
        return ok

    async def _attempt(self, delivery: WebhookDelivery) -> bool:
        try:
            return await self._post(delivery)
        except asyncio.CancelledError:
            raise
        except WebhookRefused as exc:
            log.warning("webhook %s not delivered: %s", delivery.webhook_id, exc)
        except aiohttp.ClientConnectorError as exc:  # the resolver's refusal arrives wrapped
            cause = exc.os_error if isinstance(exc.os_error, WebhookRefused) else exc.__cause__
            if isinstance(cause, WebhookRefused):
                log.warning("webhook %s not delivered: %s", delivery.webhook_id, cause)
            else:
                log.info("webhook %s to %s failed: %s", delivery.webhook_id, delivery.target,
                         _reason(exc))
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            log.info("webhook %s to %s failed: %s", delivery.webhook_id, delivery.target,
                     _reason(exc))
        except Exception as exc:  # noqa: BLE001 - one bad delivery never stops the others
            frames = "".join(traceback.format_tb(exc.__traceback__))  # no message: it may
            log.error("webhook %s to %s: unexpected %s\n%s", delivery.webhook_id,  # quote
                      delivery.target, type(exc).__name__, frames)  # the URL
        return False

    async def _post(self, delivery: WebhookDelivery) -> bool:
        session = self._session
        if session is None:
            raise RuntimeError("the webhook dispatcher is not started")
        url = URL(delivery.url)
        host = url.host or ""
        if _ip_literal(host):  # aiohttp does not resolve literals: check them here
            error = self.engine.webhook_address_error(host.strip("[]"))
            if error:
                raise WebhookRefused(f"webhook host {host}: {error}")
        body = json.dumps(delivery.payload, separators=(",", ":")).encode()
        headers = {"Content-Type": "application/json", "X-Webhook-Event": delivery.event}
        signature = delivery.signature(body)
        if signature is not None:
            headers[SIGNATURE_HEADER] = signature
        async with session.post(url, data=body, headers=headers,
                                allow_redirects=False) as response:
            await response.read()
            return 200 <= response.status < 300
