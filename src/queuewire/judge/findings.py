"""The one finding: what any tool found, judged.

A :class:`Finding` names the requirement it rests on, its verdict (FAIL, NON-STRICT or INFO,
from :mod:`queuewire.judge.verdicts`), a short stable ``kind`` and a message. The tap and the
trace pipeline add where on the wire it was seen (connection, direction, command, time); the
fuzz oracles judge a whole case and leave those out. conform's
:class:`~queuewire.conformance.model.Check` is another thing (one expectation, held or not, with
the requirement's level); its failed checks map to verdicts through the same
:func:`~queuewire.judge.verdicts.verdict_for`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .verdicts import Verdict


@dataclass(frozen=True, slots=True)
class Finding:
    level: Verdict             # FAIL | NON-STRICT | INFO
    requirement: str | None    # the requirement id it rests on (None: the documents are silent)
    kind: str                  # a short stable key: a protocol error kind, reply_schema, lost_reply, ...
    message: str
    #: where on the wire (the tap and the trace pipeline); None for a finding on a whole case
    conn_id: int | None = None
    direction: str | None = None   # c2s | s2c | none
    command: str | None = None     # the command or message the finding is about
    t_ns: int | None = None

    @property
    def fails(self) -> bool:
        """Whether this finding fails the peer (a MUST the documents state, not followed)."""
        return self.level is Verdict.FAIL

    def as_dict(self) -> dict[str, Any]:
        """JSON-able: the judgement, then where it was seen when it was seen on the wire."""
        if self.conn_id is None:
            return {"requirement": self.requirement, "level": self.level, "kind": self.kind,
                    "message": self.message}
        return {"level": self.level, "requirement": self.requirement, "conn_id": self.conn_id,
                "direction": self.direction, "command": self.command, "kind": self.kind,
                "message": self.message, "t_ns": self.t_ns}

    def __str__(self) -> str:
        return f"[{self.requirement} {self.level}] {self.kind}: {self.message}"
