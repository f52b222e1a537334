"""A fuzz case and its transcript: plain data, JSON both ways.

A case is the bytes a client sends, cut into frames (each frame is raw: its prefix or header
may lie, its payload may be no MessagePack at all), the write sizes that segment the stream
(``splits``: sizes in order, the rest in one write; empty: one write) and whether the client
half-closes its side after the last byte (``close``). ``labels`` say what the generator made
(commands, mutations), for coverage; ``seed`` and ``index`` where it came from. A transcript
adds the findings and the replies seen, and is what ``fuzz replay`` reads.

Two refinements of the write plan, both empty in most cases:

* ``pauses``: milliseconds the client waits after write ``k`` (a *slow trickle*: the frames
  arrive over time, in several reads of the server's, a timer's worth apart);
* ``conns`` (bunqueue): the connection each frame is written on, ``0 .. n-1`` (empty: all on
  one). A case on several connections writes each one's stream in order, interleaved by
  ``split_conns``: write ``k`` takes the next ``splits[k]`` bytes of connection
  ``split_conns[k]``'s stream (as many as it has left; none: the write and its pause are
  skipped), then what is left of each connection, in connection order. Every connection is
  judged on its own (:meth:`Case.sub_case`): reqIds are per connection, so two connections
  may carry the same ones and each reply must come back on its request's connection.
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
    pauses: list[int] = field(default_factory=list)       # ms after write k
    conns: list[int] = field(default_factory=list)        # connection of frame k
    split_conns: list[int] = field(default_factory=list)  # connection of write k

    @property
    def stream(self) -> bytes:
        return b"".join(self.frames)

    @property
    def connections(self) -> int:
        return max(self.conns) + 1 if self.conns else 1

    def chunks(self) -> list[bytes]:
        """The writes of a one-connection case: ``splits`` applied in order, the rest in one
        write."""
        return split_by(self.stream, self.splits)

    def writes(self) -> list[tuple[int, bytes, float]]:
        """Every write in order: (connection, bytes, seconds to wait after it)."""
        pauses = self.pauses
        if self.connections == 1:
            return [(0, chunk, pauses[k] / 1000.0 if k < len(pauses) else 0.0)
                    for k, chunk in enumerate(self.chunks())]
        streams = [b"".join(f for f, c in zip(self.frames, self.conns) if c == n)
                   for n in range(self.connections)]
        pos = [0] * len(streams)
        out = []
        for k, (size, conn) in enumerate(zip(self.splits, self.split_conns)):
            if not 0 <= conn < len(streams) or pos[conn] >= len(streams[conn]):
                continue
            out.append((conn, streams[conn][pos[conn]:pos[conn] + size],
                        pauses[k] / 1000.0 if k < len(pauses) else 0.0))
            pos[conn] += size
        out += [(conn, data[pos[conn]:], 0.0) for conn, data in enumerate(streams)
                if pos[conn] < len(data)]
        return out

    @property
    def pause_seconds(self) -> float:
        """The most the writes wait in all (a write skipped skips its pause)."""
        return sum(self.pauses) / 1000.0

    def sub_case(self, conn: int) -> Case:
        """Connection ``conn``'s share: its frames, as a one-connection case (its
        expectation is that connection's; the write plan is not carried over)."""
        frames = [f for f, c in zip(self.frames, self.conns) if c == conn] if self.conns \
            else list(self.frames)
        return Case(self.protocol, self.profile, frames, [], self.close, self.labels,
                    self.seed, self.index)

    def replace(self, **kw: Any) -> Case:
        """A copy with some fields changed (for shrinking)."""
        d = {name: getattr(self, name) for name in self.__dataclass_fields__}
        d.update(kw)
        return Case(**d)

    def drop_frames(self, start: int, size: int) -> Case:
        """A copy without frames ``start .. start+size-1`` (their connections with them)."""
        conns = self.conns[:start] + self.conns[start + size:] if self.conns else []
        if conns and max(conns) == 0:
            conns = []
        return self.replace(frames=self.frames[:start] + self.frames[start + size:],
                            conns=conns)

    def as_dict(self) -> dict[str, Any]:
        d = {"protocol": self.protocol, "profile": self.profile,
             "frames": [f.hex() for f in self.frames], "splits": list(self.splits),
             "close": self.close, "labels": list(self.labels), "seed": self.seed,
             "index": self.index}
        if self.pauses:
            d["pauses"] = list(self.pauses)
        if self.conns:
            d["conns"], d["split_conns"] = list(self.conns), list(self.split_conns)
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Case:
        case = cls(d["protocol"], d["profile"], [bytes.fromhex(f) for f in d["frames"]],
                   list(d.get("splits") or []), bool(d.get("close")),
                   list(d.get("labels") or []), d.get("seed"), d.get("index"),
                   [int(p) for p in d.get("pauses") or []],
                   [int(c) for c in d.get("conns") or []],
                   [int(c) for c in d.get("split_conns") or []])
        if case.conns and len(case.conns) != len(case.frames):
            raise ValueError(f"{len(case.conns)} connections given for {len(case.frames)} "
                             f"frames")
        if case.conns and min(case.conns) < 0:
            raise ValueError("a negative connection number")
        return case


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
