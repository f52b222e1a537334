"""Secrets out of recordings: a credential's bytes in a frame become stars before a recording
(``queuewire tap --record``, ``trace record``, ``trace import-pcap``) writes the frame.

Rules
-----
- Which request fields are secrets is spec data: the ``x-secret`` keyword of a command's
  request schema (``spec/README.md``), read into :attr:`queuewire.spec.bunqueue.Command.secret_fields`.
  Nothing here names a command or a field.
- A secret's bytes are overwritten in place with as many ``*`` as it has bytes, so the frame
  keeps its length, its length prefix and the offset of every byte after it: a recording
  still frames exactly as the traffic did, and a finding's offsets still point at the same
  bytes. The MessagePack string header in front of the value is left as it was.
- Only a string (or binary) the frame holds under a secret field is touched, and only where
  its bytes follow a MessagePack ``str`` or ``bin`` header of their length; a frame that did
  not decode to a map, or whose secret field holds anything else, is written as it came.

Design
------
:func:`redactor` builds, once per profile, the function the analyzer calls on each client
frame it hands to a recording sink: ``redact(raw, message) -> raw``. It is sans-IO and costs
a dict lookup for a frame that names no command with secrets.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

#: MessagePack headers that may precede a string or binary of ``n`` bytes, besides fixstr
#: (n < 32, one byte ``0xa0 | n``): str8, str16, str32, bin8, bin16, bin32.
_HEADS: tuple[tuple[int, int, int], ...] = (
    # (first byte, header size, largest n it holds)
    (0xD9, 2, 0xFF), (0xDA, 3, 0xFFFF), (0xDB, 5, 0xFFFFFFFF),
    (0xC4, 2, 0xFF), (0xC5, 3, 0xFFFF), (0xC6, 5, 0xFFFFFFFF),
)

Redact = Callable[[bytes, Any], bytes]


def _headed(raw: bytes | bytearray, at: int, n: int) -> bool:
    """Whether the ``n`` bytes at ``at`` follow a str/bin header that declares ``n`` bytes."""
    if n < 32 and at >= 1 and raw[at - 1] == 0xA0 | n:
        return True
    for first, size, most in _HEADS:
        if at >= size and raw[at - size] == first and n <= most \
                and int.from_bytes(raw[at - size + 1:at], "big") == n:
            return True
    return False


def blank(raw: bytes, values: list[bytes]) -> bytes:
    """``raw`` with every occurrence of each value that follows a MessagePack str/bin header
    of its length overwritten by as many ``*`` bytes (see the module docstring)."""
    out: bytearray | None = None
    for value in values:
        n = len(value)
        if not n:
            continue
        start = raw.find(value)
        while start != -1:
            if _headed(raw, start, n):
                if out is None:
                    out = bytearray(raw)
                out[start:start + n] = b"*" * n
            start = raw.find(value, start + 1)
    return raw if out is None else bytes(out)


def redactor(secret_fields: Mapping[str, tuple[str, ...]]) -> Redact | None:
    """The redaction for a protocol whose commands hold ``secret_fields`` (command name ->
    request fields marked ``x-secret``), or None when no command holds a secret."""
    if not secret_fields:
        return None
    secrets = dict(secret_fields)

    def redact(raw: bytes, message: Any) -> bytes:
        if type(message) is not dict:
            return raw
        cmd = message.get("cmd")
        fields = secrets.get(cmd) if type(cmd) is str else None
        if fields is None:
            return raw
        values = []
        for name in fields:
            value = message.get(name)
            if isinstance(value, str):
                values.append(value.encode("utf-8", "surrogatepass"))
            elif isinstance(value, (bytes, bytearray)):
                values.append(bytes(value))
        return blank(raw, values) if values else raw
    return redact
