"""bunqueue conformance cases of issue 25 ("Deviations missed") that need logic.

AddWebhook's SSRF rule (BQ-WEBHOOK-1) is probed with several URLs in one case, each judged on
its own: a YAML step stops the case at its first failed MUST check, before its ``save:`` runs,
so a webhook a server wrongly accepted would be left behind and the other URLs never tried.
Here every URL is sent and judged, and the id of each webhook the server made is kept as
``${hook<i>}`` (``i`` its index in ``params.urls``) for the case's ``cleanup:`` to remove.
"""

from __future__ import annotations

from .bunqueue_logic import is_error, is_ok
from .context import CaseContext

#: The events a probe webhook subscribes to (any documented one; it is never delivered).
PROBE_EVENTS = ["job.completed"]


async def webhook_urls_refused(ctx: CaseContext) -> None:
    """AddWebhook refuses each URL of ``params.urls`` (``[{url, why}]``) with an error reply.

    ``params.requirement`` is the requirement each refusal cites (default BQ-WEBHOOK-1, the
    stated MUST, for a fully-qualified spelling of a name the document blocks; BQ-WEBHOOK-6,
    a reading at SHOULD, for a name or address that only a resolver maps to a blocked one)."""
    params = ctx.case.params or {}
    requirement = params.get("requirement", "BQ-WEBHOOK-1")
    conn = await ctx.connect()
    for i, entry in enumerate(params["urls"]):
        url, why = entry["url"], entry["why"]
        reply = await conn.request({"cmd": "AddWebhook", "url": url, "events": PROBE_EVENTS})
        if is_ok(reply):
            hook = (reply.get("data") or {}).get("webhookId")
            if isinstance(hook, str):
                ctx.set_var(f"hook{i}", hook)  # removed by the case's cleanup
        if is_error(reply):
            said = f"refused: {reply['error']!r}"
        elif is_ok(reply):
            said = "accepted (a webhook was registered)"
        else:
            said = "not answered with an error reply" if reply is not None else "not answered"
        ctx.check(is_error(reply), f"AddWebhook {url} ({why}): {said}",
                  requirement=requirement, kind="reply",
                  expected="an error reply", actual=reply)
