"""What the tap reports: findings with requirement ids, request/reply pairs, and the bounded
aggregates (per connection, per command) they add up to.

A finding's level is a verdict of the one vocabulary (:mod:`queuewire.judge`): FAIL for a
MUST the documents state, NON-STRICT for a SHOULD (a reading or a queuewire decision), INFO
for a MAY or what the documents are silent on, derived from the cited requirement by
:func:`queuewire.judge.requirement_verdict`, so no module decides a level on its own.
Latency percentiles have one method, :func:`percentile` (linear interpolation between the
two nearest ranks), which the trace pipeline's local engine uses too and Spark's
``percentile`` computes; :data:`PERCENTILE_METHOD` is the sentence both report pages print.
The tap keeps each command's latencies exactly (8 bytes each) up to :data:`MAX_SAMPLES`;
past that, a uniform sample of that many stands for them, so memory stays bounded.
"""

from __future__ import annotations

import math
import random
from array import array
from dataclasses import dataclass, field
from typing import Any, Protocol, SupportsFloat

from ..judge import FINDING_VERDICTS


@dataclass(slots=True)
class Pair:
    """A request and the reply that answers it."""

    conn_id: int
    command: str
    key: Any                   # the reqId, task id or FIFO position that paired them
    sent_ns: int
    answered_ns: int
    ok: bool                   # False for an error reply (ok false, MSG_ERROR)
    answer: str = "reply"      # what answered: reply, MSG_OK, MSG_TASK, ...

    @property
    def latency_ns(self) -> int:
        return self.answered_ns - self.sent_ns


#: Latencies a command keeps exactly (8 MB of them); past this count the tap keeps a uniform
#: sample of this size (Vitter's algorithm R, seeded, so the same traffic gives the same
#: figures), and its percentiles are those of the sample.
MAX_SAMPLES = 1_000_000

#: How every latency percentile queuewire reports is computed, as the report pages say it.
PERCENTILE_METHOD = (
    "Latency percentiles are exact, one method for the tap and the trace: the q-th percentile of "
    "n latencies sorted is the value at rank (n - 1)·q, interpolated linearly between the two "
    "nearest ranks (numpy's and pandas' default, Spark's percentile).")


class Ranked(Protocol):
    """Values that can be counted and read by rank: a list, an ``array``, a numpy array."""

    def __len__(self) -> int: ...

    def __getitem__(self, rank: int, /) -> SupportsFloat: ...


def percentile(ordered: Ranked, q: float) -> float:
    """The ``q``-quantile (0 <= q <= 1) of ``ordered``, sorted ascending and not empty: the
    value at rank h = (n - 1) q, interpolated linearly between ranks floor(h) and floor(h) + 1
    (Hyndman and Fan's type 7; numpy's ``linear``, pandas' ``quantile``, Spark's
    ``percentile``). ``ordered`` may be a list, an ``array`` or a numpy array."""
    n = len(ordered)
    if not n:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 1.0:
        raise ValueError(f"percentile rank {q!r} is not within [0, 1]")
    h = (n - 1) * q
    lo = math.floor(h)
    low = float(ordered[lo])
    if lo + 1 >= n:
        return low
    return low + (float(ordered[lo + 1]) - low) * (h - lo)


class Latency:
    """Count, sum and max of a command's latencies (ns), and the latencies themselves (up to
    ``max_samples``; beyond, a uniform sample of that many) for exact percentiles: O(1) per
    sample, memory bounded by ``max_samples``."""

    __slots__ = ("count", "max", "max_samples", "rng", "samples", "total")

    def __init__(self, max_samples: int = MAX_SAMPLES) -> None:
        if max_samples < 1:
            raise ValueError("a latency sample keeps at least one value")
        self.count = 0
        self.total = 0
        self.max = 0
        self.max_samples = max_samples
        self.samples = array("q")
        self.rng: random.Random | None = None   # made when the sample first fills

    def add(self, ns: int) -> None:
        self.count += 1
        self.total += ns
        if ns > self.max:
            self.max = ns
        if len(self.samples) < self.max_samples:
            self.samples.append(ns)
            return
        if self.rng is None:
            self.rng = random.Random(0)
        slot = self.rng.randrange(self.count)   # keep the count-th value with p = size / count
        if slot < self.max_samples:
            self.samples[slot] = ns

    @property
    def sampled(self) -> bool:
        """Whether the percentiles are those of a sample (more than ``max_samples`` latencies)."""
        return self.count > len(self.samples)

    def percentile(self, p: float) -> float:
        """The ``p``-quantile (0 <= p <= 1) in ns, by :func:`percentile`."""
        return percentile(sorted(self.samples), p)

    def percentiles(self, *ps: float) -> list[float]:
        """Several quantiles in ns, sorting once."""
        ordered = sorted(self.samples)
        return [percentile(ordered, p) for p in ps]

    def summary(self) -> dict[str, Any]:
        """Count, mean, p50, p99 and max in µs (0.1 µs, as the trace's summary), and ``sample``:
        how many latencies the percentiles are of (``count`` unless over ``max_samples``)."""
        if not self.count:
            return {"count": 0, "mean_us": None, "p50_us": None, "p99_us": None, "max_us": None,
                    "sample": 0}
        p50, p99 = self.percentiles(0.50, 0.99)
        return {"count": self.count, "mean_us": round(self.total / self.count / 1000, 1),
                "p50_us": round(p50 / 1000, 1), "p99_us": round(p99 / 1000, 1),
                "max_us": round(self.max / 1000, 1), "sample": len(self.samples)}


@dataclass(slots=True)
class CommandStats:
    requests: int = 0
    paired: int = 0
    errors: int = 0            # paired with an error reply
    findings: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINDING_VERDICTS, 0))
    latency: Latency = field(default_factory=Latency)

    def as_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "paired": self.paired, "errors": self.errors,
                "findings": dict(self.findings), "latency": self.latency.summary()}


@dataclass(slots=True)
class ConnStats:
    conn_id: int
    client: str = ""
    upstream: str = ""
    opened_ns: int = 0
    closed_ns: int | None = None
    close_reason: str | None = None
    frames: dict[str, int] = field(default_factory=lambda: {"c2s": 0, "s2c": 0})
    bytes: dict[str, int] = field(default_factory=lambda: {"c2s": 0, "s2c": 0})
    gaps: int = 0
    requests: int = 0
    paired: int = 0
    unanswered: int = 0
    events: int = 0            # frames that answer nothing by design (pushed events, ...)
    findings: dict[str, int] = field(default_factory=lambda: dict.fromkeys(FINDING_VERDICTS, 0))

    def as_dict(self) -> dict[str, Any]:
        return {"conn_id": self.conn_id, "client": self.client, "upstream": self.upstream,
                "opened_ns": self.opened_ns, "closed_ns": self.closed_ns,
                "close_reason": self.close_reason, "frames": dict(self.frames),
                "bytes": dict(self.bytes), "gaps": self.gaps, "requests": self.requests,
                "paired": self.paired, "unanswered": self.unanswered, "events": self.events,
                "findings": dict(self.findings)}
