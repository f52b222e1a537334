"""The conformance runner's vocabulary: cases, checks, verdicts, transcripts and results.

A *case* is what a tester does to a server and what the server may do in answer. It is data
(YAML under ``cases/``) or, where it needs logic, a Python function; both become a
:class:`Case`. Running a case against a target gives a :class:`CaseResult`: a list of
:class:`Check` objects (each tied to a requirement id and its level), the wire
:class:`Transcript` of every connection, and a :class:`Verdict` derived from the checks by
:func:`verdict_of` and nothing else. Reports (console, JSON, JUnit, HTML) read only these
classes, so every output says the same thing.

Verdict rules, in order (the first that applies wins):

* ``ERROR``: the run itself broke (the target was unreachable, a case raised, a step timed out
  before the target could be judged). Never counted as a pass or a failure of the target.
* ``UNIMPLEMENTED``: the target answered the command under test with the protocol's
  "unknown command" reply. Counts as a failure of the case's MUST requirements only under
  ``--strict``; the report lists it on its own.
* ``FAIL``: a check at level MUST did not hold.
* ``NON-STRICT``: only SHOULD (or MAY) checks did not hold.
* ``INFO``: the case only observes (``Case.info``) and records what it saw.
* ``PASS``: every check held, and there was at least one check (a case that checked nothing
  is an ``ERROR``: a pass must have looked at bytes on the wire).

The check that decided a verdict is :func:`deciding_check` (for a FAIL the first failed MUST,
whatever failed before it); every report leads a case with its requirement.

What one case records is bounded (:class:`CaseTranscript`): its first
:data:`TRANSCRIPT_HEAD_EVENTS` events (:data:`TRANSCRIPT_HEAD_BYTES` bytes) and its last
:data:`TRANSCRIPT_TAIL_EVENTS` (:data:`TRANSCRIPT_TAIL_BYTES`) are kept, and one note event
between them says how many events and bytes were omitted (``transcript_cut`` in the JSON
report and case files), so a server that floods a case cannot grow the runner without bound.

Secrets: with ``--auth-token`` the runner calls :func:`redact_result` on every result before
anything reads it, so no report, case file or console line holds the token (the one place:
every writer renders these classes). In bytes each occurrence of the token (and of its
all-but-last-character near miss that ``bunqueue.auth.timing`` sends, and of its hex and
base64 forms) is replaced by a **same-length** run of ``*``: frame lengths and string headers
stay valid, and the event's ``redacted`` spans (offset, length, form) let ``conform replay
--raw --auth-token T`` put a token of that length back exactly. In decoded views, notes,
check messages and errors the same forms become ``<auth token redacted>``.
"""

from __future__ import annotations

import base64
import functools
import time
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Literal

# the judge's vocabulary: a case's verdict and a requirement's level are named once, there
from ..judge import Verdict, verdict_for
from ..spec import Profile
from ..spec.model import Level

if TYPE_CHECKING:  # RunResidue's parts; the model stays cheap to import
    from ..traffic.inventory import Break, Residue

#: The level of a :class:`Check`: its requirement's, or ``INFO`` for a note that never fails
#: (a reply field the documents do not define).
CheckLevel = Level | Literal["INFO"]

# Order used by reports (worst first) and by exit-code logic.
VERDICT_ORDER: tuple[Verdict, ...] = (Verdict.FAIL, Verdict.ERROR, Verdict.UNIMPLEMENTED,
                                      Verdict.NON_STRICT, Verdict.INFO, Verdict.PASS)


@dataclass(frozen=True)
class Case:
    """One conformance case.

    ``id`` is a stable dotted name (``bunqueue.push.priority-order``) that ``--select`` /
    ``--skip`` globs and the known-failing file match. ``requirements`` are the spec ids the
    case exercises (coverage counts them). ``steps`` is the YAML step list (see
    ``cases/README.md``); ``logic`` is ``"module:function"`` for a Python case instead.
    ``profiles``: the profiles the case applies to (empty: every profile of ``protocol``).
    ``command``: the command under test, when there is one (for UNIMPLEMENTED).
    ``cleanup``: steps run after ``steps`` (or ``logic``) whatever happened, recorded in the
    transcript but never judged (see ``cases/README.md``).
    ``exclusive``: the case reads or changes server-wide state (statistics, workers,
    webhooks, the list of queues, quicx's one task queue): with ``--jobs`` it runs alone.
    """

    id: str
    title: str
    protocol: str
    requirements: tuple[str, ...]
    steps: tuple[Any, ...] = ()
    logic: str | None = None
    profiles: tuple[str, ...] = ()
    command: str | None = None
    info: bool = False
    tags: tuple[str, ...] = ()
    params: Any = None  # free data for logic cases and generated cases
    source: str = ""  # file (and index) the case came from, for error messages
    cleanup: tuple[Any, ...] = ()  # steps always run afterwards; never judged
    exclusive: bool = False  # touches server-wide state: runs with no other case at once

    def applies_to(self, profile: Profile) -> bool:
        """Whether the case is run under ``profile``: the profile has every requirement the
        case cites (a case about job events applies wherever the profile defines them, and
        not where an overlay retired what it tests) and, when the case lists ``profiles``,
        is one of them."""
        if self.profiles and profile.name not in self.profiles:
            return False
        have = profile.requirements
        return all(rid in have for rid in self.requirements)


@dataclass
class Check:
    """One judged expectation. ``ok`` is whether it held.

    ``kind``: ``reply`` (a reply matched or not), ``schema`` (reply validated against the
    spec's response schema), ``missing-field`` / ``extra-field`` (reported separately; an
    extra field is never a failure, it is recorded with ``ok=True``), ``close`` (the
    connection was or was not closed), ``unimplemented``, ``behaviour`` (a logic check), ...
    ``expected`` / ``actual`` are JSON-able descriptions for the report.
    """

    requirement: str | None
    level: CheckLevel
    ok: bool
    kind: str
    message: str
    expected: Any = None
    actual: Any = None
    step: int | None = None  # index of the step that produced it


#: What a :class:`WireEvent` records.
Direction = Literal["send", "recv", "close", "open", "note"]


@dataclass
class WireEvent:
    """One thing seen on a connection: bytes sent or received, a close, or a note.

    ``t`` is seconds since the case started; ``conn`` numbers the case's connections from 1;
    ``decoded`` is the JSON-able decoding of ``data`` (a message, or an error description).
    ``step`` is the case step that was running when the event was recorded, numbered as the
    checks number it (``Check.step``, "step 5" in their messages: the case's steps from 1 in
    the order of its file, sleeps and closes included, then its cleanup steps); what arrives
    after the last step keeps its number; None outside steps (a Python case's own exchanges).
    ``cleanup``: recorded by a cleanup step (never judged; a Python case's cleanup steps
    number from 1 again).
    """

    t: float
    conn: int
    direction: Direction
    data: bytes = b""
    decoded: Any = None
    note: str = ""
    # (offset, length, form) of each secret masked in ``data`` (see :func:`redact_result`)
    redacted: tuple[tuple[int, int, str], ...] = ()
    step: int | None = None
    cleanup: bool = False


#: How a case that could not judge its requirement without ``--auth-token`` says so in a
#: transcript note (it ends INFO); the console lists such cases with how to cover them.
NEEDS_TOKEN = "not exercised without --auth-token"


@dataclass
class Transcript:
    """The events of one case in order. ``step`` is the step running now and ``cleaning``
    whether it is a cleanup step: the step interpreter sets them as each step starts, and
    every event added takes them (:attr:`WireEvent.step`, :attr:`WireEvent.cleanup`), so a
    report can number the transcript as the checks do."""

    started: float = field(default_factory=time.monotonic)
    events: list[WireEvent] = field(default_factory=list)
    step: int | None = None
    cleaning: bool = False

    def add(self, conn: int, direction: Direction, data: bytes = b"", decoded: Any = None,
            note: str = "") -> WireEvent:
        ev = WireEvent(time.monotonic() - self.started, conn, direction, bytes(data), decoded, note,
                       step=self.step, cleanup=self.cleaning)
        self.events.append(ev)
        return ev

    def sent(self, conn: int | None = None) -> bytes:
        """Every byte the tester sent (on one connection or all), in order: what replay sends."""
        return b"".join(e.data for e in self.events
                        if e.direction == "send" and (conn is None or e.conn == conn))


# What one case's transcript keeps (CaseTranscript). The suite's largest case records 1006
# events and 31.5 MB (bunqueue.pipe.pushes-500, the job-data limit probes) against the
# reference servers, so the head keeps every legitimate case whole with room to spare; a
# flooding server fills the head, then only the newest events are kept. Worst case ~64 MiB.
TRANSCRIPT_HEAD_EVENTS = 4000
TRANSCRIPT_HEAD_BYTES = 48 << 20
TRANSCRIPT_TAIL_EVENTS = 1000
TRANSCRIPT_TAIL_BYTES = 16 << 20  # at least one event of wire.RECORD_LIMIT bytes
OMITTED_NOTE = ("[... {events} events / {nbytes} bytes omitted: a case's transcript keeps its "
                "first {head} events (at most {head_bytes} bytes) and its last {tail} (at most "
                "{tail_bytes} bytes) ...]")


@dataclass
class CaseTranscript(Transcript):
    """A case's transcript with its head and tail kept and the middle counted (see the module
    docstring): once the head is full, each new event goes to the tail and the oldest tail
    event falls out; the note event ``marker`` (inserted where the first one fell out) says
    how many events and bytes were omitted."""

    omitted_events: int = 0
    omitted_bytes: int = 0
    unread: list[int] = field(default_factory=list)  # connections the tester stopped reading
    _head_len: int | None = field(default=None, repr=False)  # events in the head, once full
    _head_bytes: int = field(default=0, repr=False)
    _tail_bytes: int = field(default=0, repr=False)
    _marker: WireEvent | None = field(default=None, repr=False)

    def add(self, conn: int, direction: Direction, data: bytes = b"", decoded: Any = None,
            note: str = "") -> WireEvent:
        ev = super().add(conn, direction, data, decoded, note)
        size = len(ev.data)
        if self._head_len is None:
            if (len(self.events) <= TRANSCRIPT_HEAD_EVENTS
                    and self._head_bytes + size <= TRANSCRIPT_HEAD_BYTES):
                self._head_bytes += size
                return ev
            self._head_len = len(self.events) - 1  # the head is full: this event starts the tail
        self._tail_bytes += size
        start = self._head_len + (1 if self._marker is not None else 0)
        while len(self.events) - start > 1 and (len(self.events) - start > TRANSCRIPT_TAIL_EVENTS
                                                or self._tail_bytes > TRANSCRIPT_TAIL_BYTES):
            gone = self.events.pop(start)
            self._tail_bytes -= len(gone.data)
            self.omitted_events += 1
            self.omitted_bytes += len(gone.data)
            if self._marker is None:
                self._marker = WireEvent(gone.t, 0, "note", step=gone.step, cleanup=gone.cleanup)
                self.events.insert(self._head_len, self._marker)
                start += 1
        if self._marker is not None:
            self._marker.decoded = self.cut
            self._marker.note = OMITTED_NOTE.format(
                events=self.omitted_events, nbytes=self.omitted_bytes,
                head=TRANSCRIPT_HEAD_EVENTS, head_bytes=TRANSCRIPT_HEAD_BYTES,
                tail=TRANSCRIPT_TAIL_EVENTS, tail_bytes=TRANSCRIPT_TAIL_BYTES)
        return ev

    def mark_unread(self, conn: int) -> None:
        """Connection ``conn`` stopped reading (``wire.RECV_BYTES_MAX``): what the server sent
        next is in no transcript, so the transcript counts as cut."""
        if conn not in self.unread:
            self.unread.append(conn)

    @property
    def cut(self) -> dict[str, Any] | None:
        """``{"omitted_events": n, "omitted_bytes": b, "unread_connections": [...]}`` once
        something was omitted or left unread (None before)."""
        if not self.omitted_events and not self.unread:
            return None
        return {"omitted_events": self.omitted_events, "omitted_bytes": self.omitted_bytes,
                "unread_connections": list(self.unread)}


def describe_cut(cut: dict[str, Any]) -> str:
    """One line for people: what a cut transcript left out."""
    parts = []
    if cut.get("omitted_events"):
        parts.append(f"{cut['omitted_events']} events / {cut['omitted_bytes']} bytes omitted "
                     f"between its first {TRANSCRIPT_HEAD_EVENTS} and last "
                     f"{TRANSCRIPT_TAIL_EVENTS} events")
    if cut.get("unread_connections"):
        conns = ", ".join(str(c) for c in cut["unread_connections"])
        parts.append(f"the tester stopped reading connection {conns} (receive budget)")
    return "transcript cut: " + "; ".join(parts)


def transcript_cut(t: Transcript) -> dict[str, Any] | None:
    """What a case transcript omitted (None: nothing, or not a :class:`CaseTranscript`)."""
    return t.cut if isinstance(t, CaseTranscript) else None


# -- secrets ----------------------------------------------------------------------------------
REDACTED_TEXT = "<auth token redacted>"
MASK = 0x2A  # "*": the same-length mask of a secret in recorded bytes
NEAR_MISS_MIN = 4  # the token-minus-last-character form is masked from this length on


@functools.lru_cache(maxsize=8)
def secret_forms(token: str) -> tuple[tuple[str, bytes], ...]:
    """The forms of ``token`` that must never be written, longest first: the token, its hex
    (both cases) and base64, and its all-but-last-character prefix (``prefix``)."""
    raw = token.encode("utf-8")
    forms = [("token", raw), ("hex", raw.hex().encode()), ("HEX", raw.hex().upper().encode()),
             ("base64", base64.b64encode(raw).rstrip(b"="))]
    if len(raw) - 1 >= NEAR_MISS_MIN:
        forms.append(("prefix", raw[:-1]))
    return tuple(sorted(((k, v) for k, v in forms if v), key=lambda kv: -len(kv[1])))


@functools.lru_cache(maxsize=8)
def _text_forms(token: str) -> tuple[str, ...]:
    return tuple(needle.decode("utf-8", "replace") for _, needle in secret_forms(token))


def form_of(token: str, form: str) -> bytes:
    """The bytes of one form of ``token`` (what ``conform replay`` puts back in a span)."""
    return dict(secret_forms(token)).get(form, b"")


def redact_bytes(data: bytes, token: str) -> tuple[bytes, tuple[tuple[int, int, str], ...]]:
    """``data`` with every form of ``token`` masked in place by ``*`` and the spans masked."""
    if not token or not data:
        return data, ()
    buf: bytearray | None = None
    spans = []
    for form, needle in secret_forms(token):
        hay = data if buf is None else buf
        at = hay.find(needle)
        while at >= 0:
            if buf is None:
                buf = bytearray(data)
            buf[at:at + len(needle)] = bytes([MASK]) * len(needle)
            spans.append((at, len(needle), form))
            at = buf.find(needle, at + len(needle))
    if buf is None:
        return data, ()
    return bytes(buf), tuple(sorted(spans))


def redact_text(text: str, token: str) -> str:
    if not token or not isinstance(text, str):
        return text
    for form in _text_forms(token):
        if form in text:
            text = text.replace(form, REDACTED_TEXT)
    return text


def redact_value(value: Any, token: str) -> Any:
    """A JSON-able value (decoded view, check value) with every string redacted."""
    if isinstance(value, str):
        return redact_text(value, token)
    if isinstance(value, dict):
        return {redact_value(k, token): redact_value(v, token) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [redact_value(v, token) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return redact_bytes(bytes(value), token)[0]
    return value


def redact_transcript(transcript: Transcript, token: str | None) -> None:
    """Mask ``token`` in every event of ``transcript`` (bytes, views, notes), in place."""
    if not token:
        return
    for ev in transcript.events:
        if ev.data:
            ev.data, spans = redact_bytes(ev.data, token)
            ev.redacted = tuple(ev.redacted) + spans
        if ev.decoded is not None:
            ev.decoded = redact_value(ev.decoded, token)
        ev.note = redact_text(ev.note, token)


@dataclass
class CaseResult:
    case: Case
    verdict: Verdict
    checks: list[Check]
    transcript: Transcript
    duration: float
    error: str | None = None  # for ERROR: what broke
    reproduction: str = ""  # one shell line that reruns this case alone
    known_failing: bool = False  # listed in --known-failing

    @property
    def failed_checks(self) -> list[Check]:
        return [c for c in self.checks if not c.ok]


def redact_result(result: CaseResult, token: str | None) -> CaseResult:
    """``result`` with ``token`` masked everywhere it is shown or saved (transcript, checks,
    error), in place; see the module docstring."""
    if not token:
        return result
    redact_transcript(result.transcript, token)
    for c in result.checks:
        c.message = redact_text(c.message, token)
        c.expected = redact_value(c.expected, token)
        c.actual = redact_value(c.actual, token)
    if result.error:
        result.error = redact_text(result.error, token)
    return result


@dataclass
class Coverage:
    """Requirement coverage of one run.

    ``applicable``: the profile's requirement ids a server can be tested on (subject not a
    client role). ``exercised``: those cited by at least one case that ran and was judged
    (verdict PASS, FAIL, NON-STRICT or UNIMPLEMENTED). ``observed``: applicable ids cited only
    by cases whose verdict was INFO (looked at, not judged; they are also in
    ``not_exercised``). ``out_of_scope``: ids about clients, not servers, or about a
    transport the suite does not reach (quicx/1.0.3 stats on its Unix socket).
    """

    applicable: tuple[str, ...]
    exercised: tuple[str, ...]
    out_of_scope: tuple[str, ...]
    observed: tuple[str, ...] = ()

    @property
    def not_exercised(self) -> tuple[str, ...]:
        done = set(self.exercised)
        return tuple(r for r in self.applicable if r not in done)

    @property
    def unobserved(self) -> tuple[str, ...]:
        """Applicable ids no case ran on at all (neither judged nor observed)."""
        seen = set(self.exercised) | set(self.observed)
        return tuple(r for r in self.applicable if r not in seen)

    @property
    def ratio(self) -> float:
        return len(self.exercised) / len(self.applicable) if self.applicable else 1.0


@dataclass
class RunResidue:
    """What the run did to the server beside its verdicts (the profile's ``resources``
    section; ``conformance/residue.py``). Observations, never verdicts.

    ``residue``: what the cases left (``appeared``), what the run then removed (``removed``,
    when ``removing``) and what is still there with the reason (``left``), and what could not
    be listed (``unlisted``). ``breaks``: probes (``probes``, command names) that answered ok
    before the run and failed after a case, with the cases running in between; those in
    ``still_broken`` failed in the last round too (after the removals). ``failing_before``:
    probes that already failed before the first case (not watched)."""

    residue: Residue
    removing: bool = True
    kinds: tuple[str, ...] = ()
    probes: tuple[str, ...] = ()
    breaks: list[Break] = field(default_factory=list)
    failing_before: dict[str, str] = field(default_factory=dict)
    still_broken: tuple[str, ...] = ()

    @property
    def clean(self) -> bool:
        """The server holds nothing the run made, all could be listed, and no probe broke."""
        return self.residue.clean and not self.breaks

    def summary(self) -> str:
        """One console line."""
        res = self.residue
        kinds = ", ".join(self.kinds)
        if self.clean and not res.appeared:
            return f"server left as found ({kinds} listed before and after the run)"
        parts = []
        if res.appeared:
            parts.append(f"the cases left {len(res.appeared)} thing(s) on the server")
        if res.removed:
            parts.append(f"{len(res.removed)} removed by the run")
        if res.left:
            parts.append(f"{len(res.left)} still there (see below)")
        if res.unlisted:
            parts.append(f"{len(res.unlisted)} list(s) could not be read")
        if self.breaks:
            parts.append(f"{len(self.breaks)} probe(s) broke during the run")
        return "server residue: " + "; ".join(parts)

    def lines(self) -> list[str]:
        """The summary, then one line per thing removed, left, unlisted or broken."""
        res = self.residue
        out = [self.summary()]
        out += [f"  removed: {item.text()}" for item in res.removed]
        out += [f"  left: {left.text()}" for left in res.left]
        out += [f"  not listed: {what}: {why}" for what, why in res.unlisted.items()]
        out += [f"  {brk.text()}" for brk in self.breaks]
        out += [f"  still failing after the run: {name}" for name in self.still_broken]
        out += [f"  failing before the run (not watched): {name}: {err}"
                for name, err in self.failing_before.items()]
        return out

    def jsonable(self) -> dict[str, Any]:
        """Plain JSON data for the JSON report."""
        res = self.residue
        return {
            "clean": self.clean, "removing": self.removing, "kinds": list(self.kinds),
            "probes": list(self.probes), "summary": self.summary(),
            "appeared": [i.jsonable() for i in res.appeared],
            "removed": [i.jsonable() for i in res.removed],
            "left": [dict(left.item.jsonable(), reason=left.reason) for left in res.left],
            "unlisted": dict(res.unlisted),
            "breaks": [b.jsonable() for b in self.breaks],
            "still_broken": list(self.still_broken),
            "failing_before": dict(self.failing_before),
        }


@dataclass
class TargetRun:
    """Every case result of one target (one protocol and profile)."""

    target: str  # "HOST:PORT" or "embedded"
    protocol: str
    profile: str
    results: list[CaseResult]
    coverage: Coverage
    started_at: str  # ISO 8601 UTC
    duration: float
    strict: bool = False
    server_info: Any = None  # e.g. the Hello reply, when the protocol has one
    #: the command that reruns this run (no case selected; reproduce.py), and its selector
    rerun: tuple[str, ...] = ()
    select_flag: str = "--select"
    #: what the run left on the server and whether a case broke it (None: the profile lists
    #: no resources, e.g. quicx, or the target was unreachable)
    residue: RunResidue | None = None

    def counts(self) -> dict[str, int]:
        out = {v.value: 0 for v in VERDICT_ORDER}
        for r in self.results:
            out[r.verdict.value] += 1
        return out

    def failing(self) -> list[CaseResult]:
        """Results that make the run fail (see :func:`run_failed`)."""
        return [r for r in self.results if _fails_run(r, self.strict)]


def _fails_run(r: CaseResult, strict: bool) -> bool:
    if r.known_failing:
        # A known-failing case that passes makes the list stale: that fails the run.
        return r.verdict is Verdict.PASS
    if r.verdict in (Verdict.FAIL, Verdict.ERROR):
        return True
    return strict and r.verdict in (Verdict.NON_STRICT, Verdict.UNIMPLEMENTED)


def run_failed(runs: Iterable[TargetRun]) -> bool:
    """Exit status rule: True when any MUST case failed (or, with strict, any SHOULD)."""
    return any(run.failing() for run in runs)


def verdict_of(checks: Sequence[Check], *, error: str | None = None,
               unimplemented: bool = False, info: bool = False) -> Verdict:
    """The verdict the module docstring defines, from the checks alone."""
    if error is not None:
        return Verdict.ERROR
    if unimplemented:
        return Verdict.UNIMPLEMENTED
    failed = {verdict_for(c.level) for c in checks if not c.ok}  # the judge's mapping
    if Verdict.FAIL in failed:
        return Verdict.FAIL
    if failed:
        return Verdict.NON_STRICT
    if info:
        return Verdict.INFO
    if not checks:
        return Verdict.ERROR
    return Verdict.PASS


_LEVEL_RANK = {"MUST": 0, "SHOULD": 1, "MAY": 2}
_VERDICT_RANK = {Verdict.FAIL: 0, Verdict.NON_STRICT: 1}


def deciding_check(checks: Sequence[Check]) -> Check | None:
    """The check that decided a verdict :func:`verdict_of` gave, the one every report leads
    with: for UNIMPLEMENTED the ``unimplemented`` check; otherwise the first failed check of
    the highest level (for FAIL a MUST, for NON-STRICT a SHOULD before a MAY). None when no
    check failed (PASS, INFO, and an ERROR, which its error message explains)."""
    failed = [c for c in checks if not c.ok]
    unimplemented = [c for c in failed if c.kind == "unimplemented"]
    if unimplemented:
        return unimplemented[0]
    if not failed:
        return None
    return min(failed, key=lambda c: (_VERDICT_RANK.get(verdict_for(c.level), 2),
                                      _LEVEL_RANK.get(str(c.level), 3)))


def failed_in_order(checks: Sequence[Check]) -> list[Check]:
    """The failed checks with the deciding one (:func:`deciding_check`) first, the others in
    the order they were recorded."""
    first = deciding_check(checks)
    return ([first] if first is not None else []) + [c for c in checks
                                                      if not c.ok and c is not first]


def jsonable_result(r: CaseResult) -> dict[str, Any]:
    """A CaseResult as plain JSON data (bytes as hex), for the JSON report and replay files.

    Each event's ``step`` is the step it was recorded in (absent outside steps) and
    ``cleanup`` true for a cleanup step's; ``decided_by`` is the index in ``checks`` of
    :func:`deciding_check` (None when no check failed)."""
    first = deciding_check(r.checks)
    d = {
        "id": r.case.id, "title": r.case.title, "protocol": r.case.protocol,
        "requirements": list(r.case.requirements), "verdict": r.verdict.value,
        "known_failing": r.known_failing, "duration": round(r.duration, 6), "error": r.error,
        "reproduction": r.reproduction,
        "checks": [asdict(c) for c in r.checks],
        "decided_by": next((i for i, c in enumerate(r.checks) if c is first), None),
        "transcript": [
            {"t": round(e.t, 6), "conn": e.conn, "direction": e.direction, "hex": e.data.hex(),
             "decoded": e.decoded, "note": e.note,
             **({"step": e.step} if e.step is not None else {}),
             **({"cleanup": True} if e.cleanup else {}),
             **({"redacted": [list(s) for s in e.redacted]} if e.redacted else {})}
            for e in r.transcript.events
        ],
    }
    cut = transcript_cut(r.transcript)
    if cut:
        d["transcript_cut"] = cut
    return d


CASE_FIELDS = ("id", "title", "protocol", "requirements", "steps", "logic", "profiles",
               "command", "info", "tags", "params", "source", "cleanup")


def case_definition(case: Case) -> dict[str, Any]:
    """The case's own definition as JSON data (saved in replay files so that a replay re-runs
    the case as it was when the file was written, even if the suite changed since)."""
    return {k: getattr(case, k) for k in CASE_FIELDS}


def case_from_definition(d: dict[str, Any]) -> Case:
    """The inverse of :func:`case_definition` (lists become tuples); raises ValueError."""
    if not isinstance(d, dict):
        raise ValueError("'case' must be an object")
    unknown = set(d) - set(CASE_FIELDS)
    if unknown:
        raise ValueError(f"'case' has unknown key(s) {', '.join(sorted(unknown))}")
    for key in ("id", "title", "protocol", "requirements"):
        if key not in d:
            raise ValueError(f"'case' is missing {key!r}")
    tuples: dict[str, Any] = {k: tuple(d.get(k) or ()) for k in ("requirements", "steps", "profiles",
                                                                 "tags", "cleanup")}
    return Case(id=str(d["id"]), title=str(d["title"]), protocol=str(d["protocol"]),
                logic=d.get("logic"), command=d.get("command"), info=bool(d.get("info")),
                params=d.get("params"), source=str(d.get("source") or ""), **tuples)
