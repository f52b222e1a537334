"""One identity for a reqId: which reply answers which request, for every tool.

A bunqueue reply is paired with its request by the echoed ``reqId`` (BQ-PIPE-3, BQ-ENV-2).
The documents type it ``reqId?: string``, but a peer may send any MessagePack value, and the
tools must agree on when two values are the same reqId: :func:`reqid_key` is that rule, used
by the tap and the trace pipeline, ``conform`` (server and client) and the fuzz oracles.

Rules: a string is itself (the common case costs one type check); numbers compare by value
whatever their encoding (an integer the server echoes as float64 is the same reqId); ``true``
is not ``1`` and ``false`` is not ``0`` (Python's ``True == 1`` must not pair them); NaN is
the same reqId as NaN; maps and lists compare by content (maps whatever their key order);
binary by its bytes; ``undefined`` and ``nil`` are two distinct values. Every key is hashable.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

from ..codecs.bunqueue import UNDEFINED


def reqid_key(value: Any) -> Hashable:
    """The hashable identity of a reqId value (see the module's rules)."""
    if type(value) is str:
        return value
    if value is UNDEFINED:
        return ("undefined",)
    if isinstance(value, bool) or value is None:
        return ("const", value)
    if isinstance(value, float):
        if math.isnan(value):
            return ("nan",)
        return ("num", int(value)) if value.is_integer() else ("num", value)
    if isinstance(value, int):
        return ("num", value)
    if isinstance(value, dict):
        return ("map", tuple(sorted((repr(reqid_key(k)), reqid_key(v)) for k, v in value.items())))
    if isinstance(value, list | tuple):
        return ("list", tuple(reqid_key(v) for v in value))
    if isinstance(value, bytes | bytearray | memoryview):
        return ("bin", bytes(value))
    return (type(value).__name__, repr(value))
