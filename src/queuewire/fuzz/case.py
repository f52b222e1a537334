"""A fuzz case and its transcript: plain data, JSON both ways.

A case is the bytes a client sends on one connection, cut into frames (each frame is raw: its
prefix or header may lie, its payload may be no MessagePack at all), the write sizes that
segment the stream (``splits``: sizes in order, the rest in one write; empty: one write) and
whether the client half-closes its side after the last byte (``close``). ``labels`` say what
the generator made (commands, mutations), for coverage; ``seed`` and ``index`` where it came
from. A transcript adds the findings and the replies seen, and is what ``fuzz replay`` reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Case:
    protocol: str
    profile: str
    frames: list[bytes]
    splits: list[int] = field(default_factory=list)
    close: bool = False
    labels: list[str] = field(default_factory=list)
    seed: int | str | None = None
    index: int | None = None

    @property
    def stream(self) -> bytes:
        return b"".join(self.frames)

    def chunks(self) -> list[bytes]:
        """The writes: ``splits`` applied in order, the rest in one write."""
        return split_by(self.stream, self.splits)

    def as_dict(self) -> dict[str, Any]:
        return {"protocol": self.protocol, "profile": self.profile,
                "frames": [f.hex() for f in self.frames], "splits": list(self.splits),
                "close": self.close, "labels": list(self.labels), "seed": self.seed,
                "index": self.index}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Case:
        return cls(d["protocol"], d["profile"], [bytes.fromhex(f) for f in d["frames"]],
                   list(d.get("splits") or []), bool(d.get("close")), list(d.get("labels") or []),
                   d.get("seed"), d.get("index"))


def split_by(data: bytes, sizes: list[int]) -> list[bytes]:
    """``data`` cut into pieces of ``sizes`` in order (as many as it has bytes for), the rest
    in one last piece."""
    out, pos = [], 0
    for size in sizes:
        if pos >= len(data):
            break
        out.append(data[pos:pos + size])
        pos += size
    if pos < len(data):
        out.append(data[pos:])
    return out


def write_transcript(path: str, case: Case, findings: list[dict], replies: list[Any],
                     original: Case | None = None, note: str | None = None) -> None:
    doc = {"format": "queuewire-fuzz-transcript/1", "case": case.as_dict(),
           "findings": findings, "replies": replies,
           "original": original.as_dict() if original is not None else None, "note": note}
    with open(path, "w", encoding="utf-8") as fh:
        json.dump(doc, fh, indent=1, default=repr)


def read_transcript(path: str) -> tuple[Case, dict]:
    with open(path, encoding="utf-8") as fh:
        doc = json.load(fh)
    return Case.from_dict(doc["case"]), doc
