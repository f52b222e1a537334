"""A run's care for the server it tests: leave it as found, and say when a case broke it.

The bookkeeping is sans-IO (:mod:`queuewire.traffic.inventory`, driven by the profile's
``resources`` section); this module gives it a connection to the target and a place in the
run. :class:`Housekeeper` is made by the runner when the profile has a ``resources`` section:

* :meth:`Housekeeper.begin`, before the first case: an inventory of what the server keeps
  (queues, webhooks, schedules, workers; per queue its dead-letter entries and job counts)
  and a first round of health probes (the server-wide lists and the spec's ``probes``);
* :meth:`Housekeeper.started` / :meth:`Housekeeper.finished` around each case, and
  :meth:`Housekeeper.checkpoint` after it: a probe round begun after the call (concurrent
  calls share one round), so a probe that answered ok and now fails is a
  :class:`~queuewire.traffic.inventory.Break` blamed on the cases running since its last ok
  answer (with ``--jobs 1``, exactly the case before);
* :meth:`Housekeeper.end`, after the last case: a second inventory, the removal of what
  appeared (unless ``remove`` is off), a third inventory, a last probe round, and the
  :class:`~.model.RunResidue` the run result carries.

Each exchange opens its own connection (authenticated like a case's with ``--auth-token``),
pipelines its requests and closes it, so no request of ours shares a connection, a rate-limit
window or a transcript with a case. Nothing here is a verdict: a break or a leftover is an
observation about the server's state, reported beside the verdicts, never a FAIL.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from typing import Any

from ..spec import Profile
from ..spec.resources import Resources
from ..traffic.inventory import (
    HealthWatch,
    Inventory,
    Item,
    Left,
    Residue,
    Survey,
    probe_requests,
    probe_results,
    removals,
    settle,
)
from .context import CaseContext, StepError
from .model import Case, RunResidue, redact_text, redact_value
from .wire import ConnectError

Notify = Callable[[str, Any], None]
KEPT = "kept: the run was told to keep what it made (--keep-residue)"


def resources_of(profile: Profile) -> Resources | None:
    """The profile's ``resources`` section, or None (a protocol without one)."""
    res = getattr(profile.model, "resources", None)
    return res if isinstance(res, Resources) else None


class Link:
    """Requests to the target outside every case: one connection per exchange."""

    CASE = Case("queuewire.residue", "inventory and health probes", "bunqueue", ())

    def __init__(self, profile: Profile, host: str, port: int, timeout: float,
                 auth_token: str | None) -> None:
        self.profile, self.host, self.port = profile, host, port
        self.timeout, self.auth_token = timeout, auth_token
        self.trouble: str | None = None  # why the last exchange got no replies at all

    async def exchange(self, requests: list[dict[str, Any]]) -> list[Any]:
        """One reply (the decoded map, or None) per request, pipelined on a new connection."""
        self.trouble = None
        if not requests:
            return []
        ctx = CaseContext(self.CASE, self.profile, self.host, self.port, timeout=self.timeout,
                          auth_token=self.auth_token)
        replies: list[Any] = [None] * len(requests)
        try:
            conn = await ctx.connect()
            rids = [await conn.send(dict(r)) for r in requests]
            deadline = ctx.deadline()  # --timeout without a reply ends the exchange
            for i, rid in enumerate(rids):
                frame = await conn.wait_reply(rid, deadline)
                replies[i] = None if frame is None else frame.value
                if frame is not None:
                    deadline = ctx.deadline()
                if frame is None and conn.closed is not None:
                    self.trouble = f"the connection closed: {conn.closed}"
                    break
        except (ConnectError, StepError, OSError) as exc:
            self.trouble = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        finally:
            with contextlib.suppress(Exception):
                await ctx.close_all()
        return replies

    async def inventory(self, resources: Resources) -> Inventory:
        """An inventory of the server (each round one exchange); a list the connection's
        trouble kept from being read says so."""
        survey = Survey(resources)
        while not survey.done:
            reqs = survey.requests()
            known = set(survey.inventory.unlisted)
            survey.feed(await self.exchange(reqs) if reqs else [])
            if self.trouble:
                for key in set(survey.inventory.unlisted) - known:
                    survey.inventory.unlisted[key] += f" ({self.trouble})"
        return survey.result()


class Housekeeper:
    """See the module docstring. ``remove``: remove what appeared (else only report it);
    ``watch``: probe the server after each case."""

    def __init__(self, resources: Resources, link: Link, *, remove: bool = True,
                 watch: bool = True, notify: Notify | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.resources, self.link = resources, link
        self.remove, self.watch = remove, watch
        self.notify = notify or (lambda kind, value: None)
        self.clock = clock
        self.health = HealthWatch()
        self.before: Inventory | None = None
        self._probes = probe_requests(resources)
        self._running: asyncio.Future[None] | None = None  # the probe round under way
        self._queued: asyncio.Future[None] | None = None   # the round that starts after it

    async def begin(self) -> None:
        """The first probe round, then (when the server answered a probe) the inventory."""
        await self._round(baseline=True)
        if self.idle:
            self.before = Inventory(unlisted={"server": "no probe answered ok before the first "
                                              "case: " + _few(self.health.failing_before)})
            return
        self.before = await self.link.inventory(self.resources)

    @property
    def idle(self) -> bool:
        """Nothing to watch: no probe answered ok at the start (a server that does not speak
        these commands, or does not answer); then nothing is listed or removed either."""
        return not self.health.watched

    def started(self, case_id: str) -> None:
        self.health.started(case_id, self.clock())

    def finished(self, case_id: str) -> None:
        self.health.finished(case_id, self.clock())

    async def checkpoint(self) -> None:
        """Return after a probe round that began after this call (shared by concurrent
        callers: at most one round runs and one waits)."""
        if not self.watch or self.idle:
            return
        if self._queued is None:
            self._queued = asyncio.ensure_future(self._chain(self._running))
        await asyncio.shield(self._queued)

    async def _chain(self, previous: asyncio.Future[None] | None) -> None:
        if previous is not None:
            with contextlib.suppress(Exception):
                await previous
        self._running, self._queued = self._queued, None
        await self._round()

    async def _round(self, *, baseline: bool = False, after: str = "") -> None:
        names = [n for n, _ in self._probes]
        began = self.clock()
        try:
            replies = await self.link.exchange([r for _, r in self._probes])
        except Exception as exc:  # noqa: BLE001 - a probe that cannot run is a failing probe
            replies, self.link.trouble = [None] * len(names), f"{type(exc).__name__}: {exc}"
        results = probe_results(names, replies)
        if self.link.trouble:
            results = {n: (f"{e} ({self.link.trouble})" if e == "no reply" else e)
                       for n, e in results.items()}
        if baseline:
            self.health.baseline(results, began)
            return
        for brk in self.health.observe(results, began, self.clock(), after=after):
            self.notify("break", brk)

    async def end(self) -> RunResidue:
        """The second inventory, the removals, the third inventory and the last probes."""
        for pending in (self._queued, self._running):
            if pending is not None:
                with contextlib.suppress(Exception):
                    await pending
        assert self.before is not None, "begin() first"
        before = self.before
        if self.idle:
            out = RunResidue(residue=Residue(unlisted=dict(before.unlisted)),
                             removing=self.remove, kinds=tuple(self.resources.kinds),
                             probes=tuple(n for n, _ in self._probes),
                             failing_before=dict(self.health.failing_before))
            self.notify("residue", out)
            return out
        after = await self.link.inventory(self.resources)
        plan = removals(self.resources, before, after) if self.remove else []
        outcomes: dict[tuple[Any, ...], Any] = {}
        if plan:
            replies = await self.link.exchange([r.request for r in plan])
            outcomes = {r.item.ident: rep for r, rep in zip(plan, replies)}
            final = await self.link.inventory(self.resources)
        else:
            final = after
        if self.remove:
            residue = settle(self.resources, before, after, outcomes, final)
        else:
            residue = kept(self.resources, before, after)
        await self._round(after="after the removals" if plan else "after the last case")
        out = RunResidue(
            residue=residue, removing=self.remove,
            kinds=tuple(self.resources.kinds), probes=tuple(n for n, _ in self._probes),
            breaks=list(self.health.breaks), failing_before=dict(self.health.failing_before),
            still_broken=self.health.broken)
        self.notify("residue", out)
        return out


def _few(errors: dict[str, str], n: int = 3) -> str:
    shown = [f"{k} {v}" for k, v in list(errors.items())[:n]]
    return "; ".join(shown) + (f" and {len(errors) - n} more" if len(errors) > n else "")


def kept(resources: Resources, before: Inventory, after: Inventory) -> Residue:
    """The residue of a run that removes nothing: everything that appeared is left."""
    made = settle(resources, before, after, {}, after)
    return Residue(made.appeared, (), tuple(Left(item, KEPT) for item in made.appeared),
                   made.unlisted)


async def housekeeper(profile: Profile, host: str, port: int, *, timeout: float,
                      auth_token: str | None, remove: bool, watch: bool,
                      notify: Notify | None) -> Housekeeper | None:
    """A begun :class:`Housekeeper` for the target, or None when the profile has no
    ``resources`` section. The inventories are always taken; ``remove`` and ``watch`` say
    whether what appeared is removed and whether the server is probed after each case."""
    resources = resources_of(profile)
    if resources is None:
        return None
    keeper = Housekeeper(resources, Link(profile, host, port, timeout, auth_token),
                         remove=remove, watch=watch, notify=notify)
    await keeper.begin()
    return keeper



def redact_residue(found: RunResidue, token: str) -> RunResidue:
    """``found`` with ``token`` masked wherever a server's words or a key could carry it
    (model.redact_result does the same for case results)."""
    def item(i: Item) -> Item:
        return dataclasses.replace(i, key=redact_value(i.key, token),
                                   parent=redact_value(i.parent, token),
                                   detail=redact_value(dict(i.detail), token))

    res = found.residue
    clean = Residue(tuple(item(i) for i in res.appeared), tuple(item(i) for i in res.removed),
                    tuple(Left(item(x.item), redact_text(x.reason, token)) for x in res.left),
                    {k: redact_text(v, token) for k, v in res.unlisted.items()})
    breaks = [dataclasses.replace(b, error=redact_text(b.error, token)) for b in found.breaks]
    before = {k: redact_text(v, token) for k, v in found.failing_before.items()}
    return dataclasses.replace(found, residue=clean, breaks=breaks, failing_before=before)
