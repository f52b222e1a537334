"""The recorder: writes what the analyzer frames into a trace directory (``spec/trace.yaml``).

One file per live connection (the shards), each started with a file header and rotated
before a record would take it past ``rotate_bytes``; a record is never split across files.
Writes go through a buffered file, so a record costs one header ``pack`` and two buffered
writes; files are flushed when they rotate or their connection closes, and all of them by
:meth:`Recorder.close`. At most :data:`MAX_OPEN_FILES` files are open at once: beyond that
the least recently written is closed and reopened to append when its connection next
writes, so a recording of many live connections (a busy tap, a capture imported from
anywhere) needs a bounded number of descriptors and write buffers. Layout and codes come
from :func:`.trace_format.trace_format`.
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from .. import __version__
from .trace_format import TraceFormat, trace_format

_BUFFER = 1 << 20
#: Files kept open at once. A recording holds a file per live connection; the descriptor
#: limit (ulimit -n) is 1024 by default and each open file holds a _BUFFER write buffer.
MAX_OPEN_FILES = 128


class _Shard:
    __slots__ = ("count", "fh", "path", "sequence", "size")

    def __init__(self) -> None:
        self.fh: Any = None   # None while closed to bound the open files (see _reopen)
        self.path: Path | None = None
        self.sequence = -1
        self.size = 0    # bytes in the current file
        self.count = 0   # records in the current file


class Recorder:
    """Writes records into ``directory`` (created if missing)."""

    def __init__(self, directory: str | Path, *, protocol: str, profile: str,
                 rotate_bytes: int | None = None, run: str | None = None):
        self.fmt: TraceFormat = trace_format()
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.protocol, self.profile = protocol, profile
        self.rotate_bytes = rotate_bytes if rotate_bytes is not None else self.fmt.rotate_bytes
        if self.rotate_bytes <= 0:
            raise ValueError("rotate_bytes must be positive")
        self.run = run or time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        self._shards: dict[int, _Shard] = {}
        self._open_lru: OrderedDict[int, _Shard] = OrderedDict()  # open files, oldest first
        self._pack = self.fmt.record_head.pack
        self._head_size = self.fmt.record_head.size
        self._types = self.fmt.record_types
        self._dirs = self.fmt.directions
        self._reasons = self.fmt.gap_reasons
        self.files_written = 0
        self.records = 0
        self.bytes = 0

    def _make_room(self) -> None:
        while len(self._open_lru) >= MAX_OPEN_FILES:
            _, oldest = self._open_lru.popitem(last=False)
            oldest.fh.close()
            oldest.fh = None

    def _reopen(self, conn_id: int, shard: _Shard) -> None:
        """Open the connection's current file again, to append (it was closed for room)."""
        self._make_room()
        assert shard.path is not None
        shard.fh = open(shard.path, "ab", buffering=_BUFFER)  # noqa: SIM115
        self._open_lru[conn_id] = shard

    def _open(self, conn_id: int, shard: _Shard) -> None:
        if shard.fh is not None:
            shard.fh.close()
            shard.fh = None
            del self._open_lru[conn_id]
        shard.sequence += 1
        name = self.fmt.file_pattern.format(run=self.run, conn_id=conn_id, sequence=shard.sequence)
        meta = json.dumps({"protocol": self.protocol, "profile": self.profile, "conn_id": conn_id,
                           "sequence": shard.sequence, "run": self.run,
                           "created_ns": time.time_ns(), "tool": f"queuewire/{__version__}"},
                          separators=(",", ":")).encode()
        head = self.fmt.file_head.pack(self.fmt.magic, self.fmt.version, len(meta)) + meta
        self._make_room()
        shard.path = self.directory / name
        shard.fh = open(shard.path, "wb", buffering=_BUFFER)  # noqa: SIM115
        self._open_lru[conn_id] = shard
        shard.fh.write(head)
        shard.size = len(head)
        shard.count = 0
        self.files_written += 1

    def write(self, record_type: str, conn_id: int, direction: str, t_ns: int,
              payload: bytes | bytearray | memoryview = b"", reason: str | None = None) -> None:
        """Append one record to the connection's current file (rotating first if needed)."""
        shard = self._shards.get(conn_id)
        if shard is None:
            shard = self._shards[conn_id] = _Shard()
            self._open(conn_id, shard)
        n = self._head_size + len(payload)
        if shard.size + n > self.rotate_bytes and shard.count:
            self._open(conn_id, shard)
        elif shard.fh is None:
            self._reopen(conn_id, shard)
        else:
            self._open_lru.move_to_end(conn_id)
        shard.fh.write(self._pack(self._types[record_type], self._dirs[direction],
                                  self._reasons[reason] if reason else 0, conn_id, t_ns,
                                  len(payload)))
        if payload:
            shard.fh.write(payload)
        shard.size += n
        shard.count += 1
        self.records += 1
        self.bytes += n
        if record_type == "close":
            shard.fh.close()
            del self._shards[conn_id]
            del self._open_lru[conn_id]

    def flush(self) -> None:
        for shard in self._open_lru.values():
            shard.fh.flush()

    def close(self) -> None:
        """Close every open file (connections still open keep their records so far)."""
        for shard in self._open_lru.values():
            shard.fh.close()
            shard.fh = None
        self._open_lru.clear()
        self._shards.clear()
