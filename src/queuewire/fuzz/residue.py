"""What a fuzz run leaves on the server, and whether it broke it: the I/O around
:mod:`queuewire.traffic.inventory` for :mod:`.campaign`.

Rules
-----
* Before the first case the run lists what the server keeps (the profile's ``resources``:
  queues, webhooks, crons, workers, and what queues hold) and asks the health probes; after
  the last case it lists again, removes what appeared (a webhook before the queue it names),
  lists a third time and reports what it could not remove
  (:class:`~queuewire.traffic.inventory.Residue`).
* A probe that answered ok before the run and fails after a window of cases is a
  :class:`~queuewire.traffic.inventory.Break` naming the window (``cases 7000-7999``): an
  observation of the server's state, never a verdict. Workers probe every
  :data:`PROBE_EVERY` cases of their own.
* Every connection authenticates first when the run has a token; the replies are never
  judged.

Design
------
:class:`Housekeeping` is blocking (the fuzzer's workers are plain loops):
:meth:`Housekeeping.exchange` writes batches of requests through the runner's
:meth:`~.runner.Runner.exchange` (a fresh connection each, one reply per request by reqId,
within the bound); the inventory module does the rest, sans-IO.
"""

from __future__ import annotations

import time
from typing import Any

from ..spec import Profile
from ..traffic.inventory import (
    Break,
    HealthWatch,
    Inventory,
    Residue,
    probe_requests,
    probe_results,
    removals,
    settle,
    take,
)
from .runner import DEFAULT_BOUND, Runner

#: cases a worker plays between two health probes
PROBE_EVERY = 1000
BATCH = 64   # requests written at once on one connection


class Housekeeping:
    """A fuzz run's inventory, removals and health probes against one server (bunqueue; a
    profile without ``resources`` does nothing)."""

    def __init__(self, profile: Profile, host: str, port: int, *,
                 bound: float = DEFAULT_BOUND, auth_token: str | None = None):
        self.profile = profile
        self.resources = getattr(profile.model, "resources", None)
        self.runner = Runner(profile.protocol, profile.name, host, port, bound=bound,
                             reuse=False, auth_token=auth_token)
        self.bound = bound
        self.watch = HealthWatch()
        self.before: Inventory | None = None
        self._probes = probe_requests(self.resources) if self.resources is not None else []

    @property
    def active(self) -> bool:
        return self.resources is not None and self.profile.protocol == "bunqueue"

    def exchange(self, requests: list[dict[str, Any]]) -> list[Any]:
        """One reply per request (None: none within the bound), :data:`BATCH` at a time on a
        fresh connection each (:meth:`~.runner.Runner.exchange`). A server that closes the
        connection on one of them (a queue named by a float, say) costs only that one: the
        requests a closed connection left unanswered are asked again one per connection."""
        if not self.active:
            return []
        out: list[Any] = []
        within = self.bound * 2
        for i in range(0, len(requests), BATCH):
            batch = requests[i:i + BATCH]
            replies, closed, _sent = self.runner.exchange(batch, within=within, wide=True)
            if closed:
                for k, reply in enumerate(replies):
                    if reply is None:
                        replies[k] = self.runner.exchange([batch[k]], within=within,
                                                          wide=True).replies[0]
            out += replies
        return out

    def probe(self) -> dict[str, str | None]:
        """Each health probe's error now (None: answered ok)."""
        names = [n for n, _ in self._probes]
        return probe_results(names, self.exchange([dict(r) for _, r in self._probes]))

    def begin(self) -> None:
        """The inventory and the probes' baseline, before the first case."""
        if not self.active:
            return
        assert self.resources is not None
        began = time.monotonic()
        self.before = take(self.resources, self.exchange)
        self.watch.baseline(self.probe(), began)

    def window(self, label: str, began: float, ended: float,
               results: dict[str, str | None], probed: float) -> list[Break]:
        """A window of cases (``label``, e.g. ``cases 0-999``, played from ``began`` to
        ``ended``, a worker's :meth:`probe` ``results`` asked at ``probed``): the probes that
        answered ok before and fail now."""
        if not self.active:
            return []
        self.watch.started(label, began)
        self.watch.finished(label, ended)
        return self.watch.observe(results, probed, time.monotonic(), after=f"after {label}")

    def end(self) -> Residue | None:
        """After the last case: list, remove what appeared, list again (see the rules)."""
        if not self.active or self.before is None:
            return None
        assert self.resources is not None
        after = take(self.resources, self.exchange)
        planned = removals(self.resources, self.before, after)
        replies = self.exchange([dict(r.request) for r in planned])
        outcomes = {r.item.ident: reply for r, reply in zip(planned, replies)}
        final = take(self.resources, self.exchange)
        now = time.monotonic()
        self.watch.observe(self.probe(), now, time.monotonic(), after="after the removals")
        return settle(self.resources, self.before, after, outcomes, final)
