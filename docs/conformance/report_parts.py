"""The pieces the report of the real bunqueue 2.9.5 server is built of: wire evidence read
from a report directory's case files (:class:`Evidence`, each frame's hex under its MessagePack
decoding), and the forms of the hand-written explanations (:class:`Section`: a deviation or a
reading with its cases; :class:`Finding`: one NON-STRICT case). ``explanations.py`` holds the
explanations themselves, ``make_report.py`` checks a run against them and writes the page."""

from __future__ import annotations

import base64
import json
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgpack

PROFILE = "bunqueue/v2"
JOB_KEYS = ("id", "queue", "data", "attempts", "stallCount")


class ReportError(Exception):
    """The run does not match the hand-written explanations (or an input is unreadable)."""


# --- wire evidence from a report directory's case files -------------------------------------


class Long(str):
    """A string too long to show: its start and length."""


def _frame_bytes(event: dict) -> bytes:
    if event.get("hex") is not None and "zlib_base64" not in event:
        return bytes.fromhex(event["hex"])
    return zlib.decompress(base64.b64decode(event["zlib_base64"]))


def _decode(data: bytes, fallback: object) -> object:
    def ext_hook(code: int, _payload: bytes) -> object:
        return {"$undefined": True} if code == 0 else f"ext{code}"

    try:
        return msgpack.unpackb(data[4:], raw=False, strict_map_key=False, ext_hook=ext_hook)
    except Exception:  # noqa: BLE001 - a frame that is not MessagePack shows as the run decoded it
        return fallback


def _view(v: object) -> object:
    if isinstance(v, dict):
        if v == {"$undefined": True}:
            return "undefined"
        if "createdAt" in v and "attempts" in v:  # a job record: the keys that matter
            out: dict = {k: _view(v[k]) for k in JOB_KEYS if k in v}
            out["…"] = f"{len(v) - len(out)} more keys"
            return out
        return {k: _view(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_view(x) for x in v]
    if isinstance(v, str) and len(v) > 60:
        return Long(v)
    return v


def _render(v: object) -> str:
    if isinstance(v, Long):
        return f'"{v[:16]}…" ({len(v)} characters)'
    if v == "undefined":
        return "undefined"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_render(x)}" for k, x in v.items()) + "}"
    if isinstance(v, list):
        return "[" + ", ".join(_render(x) for x in v) + "]"
    if isinstance(v, str):
        return json.dumps(v, ensure_ascii=False)
    if isinstance(v, bool):
        return "true" if v else "false"
    if v is None:
        return "null"
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return str(v)


def _hex(data: bytes, limit: int = 96) -> str:
    h = data.hex()
    if len(data) <= limit:
        return " ".join(h[i:i + 2] for i in range(0, len(h), 2))
    head = " ".join(h[i:i + 2] for i in range(0, 2 * 48, 2))
    return f"{head} … ({len(data)} bytes in all)"


@dataclass(frozen=True)
class Evidence:
    """Which frames of a case's transcript to show: by reqId, by command, by connection."""

    case: str
    cmds: tuple[str, ...] | None = None
    conns: tuple[int, ...] | None = None
    closes: bool = False

    def render(self, cases_dir: Path) -> str:
        path = cases_dir / f"{self.case}.json"
        try:
            transcript = json.loads(path.read_text())["transcript"]
        except (OSError, ValueError, KeyError) as exc:
            raise ReportError(f"cannot read the transcript of {self.case} ({path}): {exc}") from exc
        reqids: set | None = None
        if self.cmds is not None:
            reqids = set()
            for e in transcript:
                if e["direction"] == "send":
                    dec = _decode(_frame_bytes(e), e.get("decoded"))
                    if isinstance(dec, dict) and dec.get("cmd") in self.cmds:
                        reqids.add(dec.get("reqId"))
        lines = []
        for e in transcript:
            kind = e["direction"]
            if kind == "open":
                continue
            if kind == "close":
                if self.closes:
                    lines.append(f"c{e['conn']} --  {e['note']}")
                continue
            data = _frame_bytes(e)
            dec = _decode(data, e.get("decoded"))
            rid = dec.get("reqId") if isinstance(dec, dict) else None
            if reqids is not None and rid not in reqids:
                continue
            if self.conns is not None and int(e["conn"]) not in self.conns:
                continue
            arrow = "->" if kind == "send" else "<-"
            lines.append(f"c{e['conn']} {arrow} {_render(_view(dec))}")
            lines.append(f"      {_hex(data)}")
        if not lines:
            raise ReportError(f"no frames of {self.case} match the evidence selection {self}")
        return "```text\n" + "\n".join(lines) + "\n```\n"



# --- the forms of the explanations --------------------------------------------------------


@dataclass
class Section:
    """One deviation: the cases it explains and why, in the documents' words and the server's."""

    title: str
    reqs: list[str]
    docs: str
    did: str
    evidence: list[Evidence]
    cases: list[str]
    reason: str | Callable[[str], str]  # the known-failing comment, ending in its requirements
    note: str | None = None
    also: dict[str, list[str]] = field(default_factory=dict)  # case -> other requirements it fails
    documented_by_295: bool = False  # profile bunqueue/2.9.5 documents this behaviour

    def reason_for(self, case_id: str) -> str:
        return self.reason(case_id) if callable(self.reason) else self.reason


@dataclass(frozen=True)
class Finding:
    """A NON-STRICT case: a SHOULD the server does not follow, and why it is not a deviation."""

    case: str
    requirement: str  # the SHOULD its failing checks cite
    why: str
    may_pass: bool = False  # the server passes it by chance now and then
