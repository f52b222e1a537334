"""Typed protocol errors that carry the spec rule they enforce and the reaction it demands.

Like wsproto's ``ParseFailed``, an error says what the peer did wrong *and* what the protocol
wants done about it: ``reaction`` is ``close`` (terminate the connection: the byte stream can
no longer be trusted), ``reply`` (answer with an error reply and keep going: the frame boundary
is intact) or ``raise`` (a local misuse, e.g. encoding a value the wire cannot carry). Each
error names its requirement id, the kind from the spec's ``protocol_errors`` table, the
absolute byte offset in the stream where it applies and, for schema errors, the JSON path.
Kinds, requirement ids and reactions come from the spec, never from this module.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..spec.model import ProtocolErrorKind


@dataclass(frozen=True)
class Violation:
    """One rule a message breaks: a requirement id, its level, where, and what happened."""

    requirement: str
    level: str
    path: str
    message: str

    def as_dict(self) -> dict[str, str]:
        return {"requirement": self.requirement, "level": self.level, "path": self.path,
                "message": self.message}

    def __str__(self) -> str:
        where = f" at {self.path}" if self.path else ""
        return f"[{self.requirement} {self.level}]{where}: {self.message}"


class ProtocolError(Exception):
    """A peer's bytes break a rule of the protocol.

    ``frames`` holds what the decoder produced before the error in the same ``feed`` call,
    so that raising never loses good frames. ``error_code`` is the numeric code a protocol
    with error codes (quicx's MSG_ERROR) answers a ``reply`` error with; None otherwise.
    """

    error_code: int | None = None

    def __init__(self, kind: ProtocolErrorKind, message: str, *, offset: int | None = None,
                 path: str | None = None, frames: list[Any] | None = None,
                 violations: tuple[Violation, ...] = (), requirement: str | None = None):
        self.kind = kind.name
        self.requirement = requirement or kind.requirement
        self.reaction = kind.reaction
        self.detail = message
        self.offset = offset
        self.path = path
        self.frames = frames if frames is not None else []
        self.violations = violations
        super().__init__(str(self))

    def __str__(self) -> str:
        parts = [f"[{self.requirement}] {self.kind}: {self.detail}"]
        if self.offset is not None:
            parts.append(f"at byte {self.offset}")
        if self.path:
            parts.append(f"at {self.path}")
        parts.append(f"(reaction: {self.reaction})")
        return " ".join(parts)

    def as_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "requirement": self.requirement, "reaction": self.reaction,
                "error_code": self.error_code, "message": self.detail, "offset": self.offset,
                "path": self.path, "violations": [v.as_dict() for v in self.violations]}


class FramingError(ProtocolError):
    """The byte stream itself is broken (length prefix, truncation, header)."""


class PayloadError(ProtocolError):
    """A frame is intact but its payload cannot be decoded."""


class MessageError(ProtocolError):
    """A decoded message does not fit the protocol (envelope, unknown command, schema)."""


class EncodeError(ProtocolError):
    """A value cannot be written to the wire under the profile's rules."""
