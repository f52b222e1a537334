"""What the tap reports: findings with requirement ids, request/reply pairs, and the bounded
aggregates (per connection, per command) they add up to.

A finding's level is a verdict of the one vocabulary (:mod:`queuewire.judge`): FAIL for a
MUST the documents state, NON-STRICT for a SHOULD (a reading or a queuewire decision), INFO
for a MAY or what the documents are silent on, derived from the cited requirement by
:func:`queuewire.judge.requirement_verdict`, so no module decides a level on its own.
Latencies are kept as a fixed log-linear histogram per command (plus exact count, sum and
max), so memory does not grow with traffic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

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


class Latency:
    """Count, sum, max and a log-linear histogram (8 buckets per power of two, so a
    percentile is within 12.5 % of the truth): O(1) per sample, fixed memory."""

    __slots__ = ("buckets", "count", "max", "total")

    def __init__(self) -> None:
        self.count = 0
        self.total = 0
        self.max = 0
        self.buckets = [0] * (64 * 8)

    def add(self, ns: int) -> None:
        self.count += 1
        self.total += ns
        if ns > self.max:
            self.max = ns
        b = ns.bit_length()
        self.buckets[(b << 3) | ((ns >> (b - 4)) & 7) if b > 4 else ns if ns > 0 else 0] += 1

    @staticmethod
    def _value(index: int) -> int:
        """The upper edge of a bucket, in ns."""
        if index < 40:  # exact small values (b <= 4 stores ns itself)
            return index
        b, m = index >> 3, index & 7
        return ((8 | m) + 1) << (b - 4)

    def percentile(self, p: float) -> int:
        rank = max(1, int(p * self.count + 0.5))
        seen = 0
        for index, n in enumerate(self.buckets):
            seen += n
            if seen >= rank:
                return min(self._value(index), self.max)
        return self.max

    def summary(self) -> dict[str, float | None]:
        if not self.count:
            return {"count": 0, "mean_us": None, "p50_us": None, "p99_us": None, "max_us": None}
        return {"count": self.count, "mean_us": round(self.total / self.count / 1000, 1),
                "p50_us": round(self.percentile(0.50) / 1000, 1),
                "p99_us": round(self.percentile(0.99) / 1000, 1),
                "max_us": round(self.max / 1000, 1)}


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
