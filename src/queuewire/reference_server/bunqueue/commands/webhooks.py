"""Commands: AddWebhook, RemoveWebhook, ListWebhooks (webhooks.yaml).

AddWebhook keeps the server's bounds (BQ-SAFE-1, issue 22 item 7): at most
``safeguards.webhooks_per_queue`` hooks on one queue (hooks without a queue, which hear every
queue, are one more scope with the same bound), so one PUSH makes at most twice that many
deliveries, and at most ``safeguards.max_webhooks`` on the server; beyond either it is refused
with ``webhook_limit_reached`` naming the bound. How the deliveries themselves are bounded
(a queue per hook, slots per host) is the HTTP shell's (:mod:`..webhook_delivery`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..jobs import uuid7
from ..model import Refused
from ..webhook_urls import webhook_url_error
from .registry import command

if TYPE_CHECKING:
    from ..engine import BunqueueEngine


@command("AddWebhook")
def add_webhook(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    url, events = req["url"], list(req["events"])
    invalid = [e for e in events if e not in engine._webhook_events]
    if invalid:  # BQ-WEBHOOK-5
        raise Refused("webhook_invalid_events", events=", ".join(map(str, invalid)),
                      valid=", ".join(engine._webhook_events))
    problem = webhook_url_error(url, allow_private=engine.config.allow_private_webhooks)
    if problem is not None:  # BQ-WEBHOOK-1
        raise Refused(problem)
    safeguards = engine.profile.model.safeguards  # BQ-SAFE-1
    total = int(safeguards["max_webhooks"])
    if len(engine._webhooks) >= total:
        raise Refused("webhook_limit_reached", max=total)
    per_queue = int(safeguards["webhooks_per_queue"])
    queue = req.get("queue")
    if sum(1 for h in engine._webhooks.values() if h.get("queue") == queue) >= per_queue:
        raise Refused("webhook_limit_reached", max=per_queue)
    hook = {"id": uuid7(now), "url": url, "events": events, "queue": req.get("queue"),
            "secret": req.get("secret"), "createdAt": now, "lastTriggered": None,
            "successCount": 0, "failureCount": 0, "enabled": True}
    engine._webhooks[hook["id"]] = hook
    engine.store.put_webhook(dict(hook))
    data = {"webhookId": hook["id"], "url": url, "events": list(events), "createdAt": now}
    if hook["queue"] is not None:
        data["queue"] = hook["queue"]
    return {"ok": True, "data": data}


@command("RemoveWebhook")
def remove_webhook(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    if engine._webhooks.pop(req["webhookId"], None) is None:
        raise Refused("webhook_not_found")  # BQ-WEBHOOK-4
    engine.store.delete_webhook(req["webhookId"])
    return {"ok": True, "data": {"removed": True}}


@command("ListWebhooks")
def list_webhooks(engine: BunqueueEngine, conn_id: str | None, req: dict, now: float) -> dict:
    hooks = []
    for h in engine._webhooks.values():  # never the secret
        item = {k: h[k] for k in ("id", "url", "createdAt", "lastTriggered",
                                  "successCount", "failureCount", "enabled")}
        item["events"] = list(h["events"])
        if h.get("queue") is not None:
            item["queue"] = h["queue"]
        hooks.append(item)
    return {"ok": True, "data": {"webhooks": hooks, "stats": {
        "total": len(hooks), "enabled": sum(h["enabled"] for h in hooks)}}}
