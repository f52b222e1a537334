"""A failing fuzz case made small, confirmed and saved: shrinking, transcripts and replay.

Rules
-----
* A case is shrunk only while it keeps failing the same way: a candidate counts when one of
  its failing findings has the requirement *and* the kind (lost_reply, reply_schema, ...) of
  one of the original's. A candidate that fails differently is another finding, not a smaller
  copy of this one.
* A saved case reproduces. Before a transcript is written, the shrunk case is played once
  more on a fresh connection; when it no longer fails, the unshrunk case is played and saved
  instead (the transcript says so); when neither fails, nothing is saved and the failure is
  reported as not reproducible (it depended on what earlier cases left on the server). At the
  end of a campaign, after the run's residue is removed, every transcript is replayed again
  (:func:`confirm_saved_sync`): one that now passes is replaced by its unshrunk case when that
  still fails, else moved aside into ``unconfirmed/`` with the reason.
* A server that no longer answers cannot judge smaller cases (every one would "fail"): such a
  case is saved whole, with a note; replay it against a restarted server.

Design
------
Shrinking is delta debugging on the case, re-run on fresh connections (:func:`shrink`): drop
frames (halves, then one at a time, each with its connection), then no pauses, one
connection, one write (per connection) instead of the split, then no half-close. Every
connection authenticates first when the run has a token (:class:`~.runner.Runner`).

Seams
-----
:func:`shrink_and_save_sync` is what a campaign's worker calls for each failure;
:func:`confirm_saved_sync` what the campaign calls once at the end; :func:`replay` what
``queuewire fuzz replay`` calls. The async faces run the blocking runner in a thread, so an
in-process server on the caller's event loop keeps serving.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Iterable
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from typing import Any

from .case import Case, read_transcript, write_transcript
from .runner import DEFAULT_BOUND, Result, Runner

#: where :func:`confirm_saved_sync` moves a transcript that no longer reproduces
UNCONFIRMED = "unconfirmed"


def signature(findings: Iterable[Any]) -> set[tuple[str | None, str]]:
    """What a case's failure is, for "still fails the same way": its failing findings'
    (requirement, kind) pairs."""
    return {(f.requirement, f.kind) for f in findings if f.fails}


def shrink(case: Case, run: Callable[[Case], Result],
           wanted: AbstractSet[tuple[str | None, str]], budget: int = 200) -> Case:
    """Delta debugging: the smallest variant of ``case`` that still fails with one of the
    (requirement, kind) pairs in ``wanted``."""
    tries = 0

    def fails(c: Case) -> bool:
        nonlocal tries
        tries += 1
        return bool(signature(run(c).findings) & wanted)

    best = case
    n = 2
    while len(best.frames) >= 2 and tries < budget:
        size = max(1, len(best.frames) // n)
        reduced = False
        for start in range(0, len(best.frames), size):
            cand = best.drop_frames(start, size)
            if cand.frames and fails(cand):
                best, n, reduced = cand, max(2, n - 1), True
                break
            if tries >= budget:
                break
        if not reduced:
            if size == 1:
                break
            n = min(len(best.frames), n * 2)
    # then a simpler write plan: no pauses, one connection, one write (per connection), no
    # half-close; each kept only while the case still fails
    steps: list[dict[str, Any]] = [{"pauses": []}]
    if best.conns:
        steps.append({"conns": [], "split_conns": [], "splits": [], "pauses": []})
    steps += [{"splits": [], "split_conns": [], "pauses": []}, {"close": False}]
    for kw in steps:
        if tries >= budget:
            break
        cand = best.replace(**kw)
        if cand.as_dict() != best.as_dict() and fails(cand):
            best = cand
    return best


def run_fresh_sync(protocol: str, profile: str, host: str, port: int, case: Case,
                   bound: float = DEFAULT_BOUND, auth_token: str | None = None) -> Result:
    """One case on a fresh connection (authenticated first when a token is given)."""
    runner = Runner(protocol, profile, host, port, bound=bound, reuse=False,
                    auth_token=auth_token)
    try:
        return runner.run(case)
    finally:
        runner.close()


@dataclass(frozen=True)
class Saved:
    """What became of one failing case: the case saved (the shrunk one, or the original when
    the shrunk one did not fail again), its transcript's path (None: no artifacts directory,
    or nothing saved), and a note when it is not the plain shrunk case."""

    case: Case
    path: str | None
    note: str | None = None
    reproduced: bool = True


def transcript_path(artifacts: str, case: Case) -> str:
    return os.path.join(artifacts, f"{case.protocol}-{case.seed}-{case.index}.json")


def shrink_and_save_sync(res: Result, host: str, port: int, artifacts: str | None,
                         bound: float = DEFAULT_BOUND, auth_token: str | None = None,
                         wanted: AbstractSet[tuple[str | None, str]] | None = None) -> Saved:
    """Shrink a failing case, confirm what is kept still fails, and write its transcript into
    ``artifacts`` (see the module's rules). ``wanted``: the (requirement, kind) pairs the
    kept case must fail with (default: every failing finding's; a campaign leaves out the
    known deviations)."""
    case = res.case
    wanted = signature(res.findings) if wanted is None else wanted

    def run(c: Case) -> Result:
        return run_fresh_sync(case.protocol, case.profile, host, port, c, bound, auth_token)

    probe = Runner(case.protocol, case.profile, host, port, bound=bound, reuse=False,
                   auth_token=auth_token)
    dead = bool(probe.alive())
    if dead:
        kept, final = case, res
        note: str | None = "not shrunk: the server stopped answering"
    else:
        small = shrink(case, run, wanted)
        kept, final, note = small, run(small), None
        if not signature(final.findings) & wanted:
            again = run(case) if small is not case else final
            if not signature(again.findings) & wanted:
                return Saved(case, None, "not saved: the failure did not reproduce on a fresh "
                             "connection (it depended on what earlier cases left on the "
                             "server)", reproduced=False)
            kept, final = case, again
            note = "not shrunk: the shrunk case did not fail again on its own"
    path = None
    if artifacts:
        os.makedirs(artifacts, exist_ok=True)
        path = transcript_path(artifacts, case)
        write_transcript(path, kept, [f.as_dict() for f in final.findings],
                         [jsonable(r) for r in final.replies], original=case, note=note)
    return Saved(kept, path, note)


def confirm_saved_sync(saved: Iterable[tuple[Case, Saved]], host: str, port: int,
                       bound: float = DEFAULT_BOUND,
                       auth_token: str | None = None) -> list[tuple[Case, Saved]]:
    """Replay every saved transcript once more (at the end of a run, after its residue was
    removed) and return the failures as they now stand: a transcript whose case passes is
    rewritten with the unshrunk case when that still fails, else moved into
    ``unconfirmed/`` beside it and reported as not reproducible. A server that no longer
    answers confirms nothing: the transcripts are left as they are, each with a note."""
    saved = list(saved)
    out: list[tuple[Case, Saved]] = []
    if saved:
        first = saved[0][0]
        probe = Runner(first.protocol, first.profile, host, port, bound=bound, reuse=False,
                       auth_token=auth_token)
        if probe.alive():
            note = "not confirmed after the run: the server stopped answering"
            return [(case, Saved(entry.case, entry.path,
                                 f"{entry.note}; {note}" if entry.note else note,
                                 entry.reproduced)) for case, entry in saved]

    def run(c: Case) -> Result:
        return run_fresh_sync(c.protocol, c.profile, host, port, c, bound, auth_token)

    for original, entry in saved:
        if entry.path is None or not os.path.exists(entry.path):
            out.append((original, entry))
            continue
        kept, doc = read_transcript(entry.path)
        wanted = {(f.get("requirement"), f.get("kind")) for f in doc.get("findings", [])
                  if f.get("level") == "FAIL"}
        if signature(run(kept).findings) & wanted:
            out.append((original, entry))
            continue
        if kept.as_dict() != original.as_dict():
            again = run(original)
            if signature(again.findings) & wanted:
                note = "not shrunk: the shrunk case did not fail again after the run"
                write_transcript(entry.path, original, [f.as_dict() for f in again.findings],
                                 [jsonable(r) for r in again.replies], original=original,
                                 note=note)
                out.append((original, Saved(original, entry.path, note)))
                continue
        aside = os.path.join(os.path.dirname(entry.path), UNCONFIRMED)
        os.makedirs(aside, exist_ok=True)
        moved = os.path.join(aside, os.path.basename(entry.path))
        os.replace(entry.path, moved)
        out.append((original, Saved(kept, None, f"not reproducible after the run (moved to "
                                    f"{moved}): it depended on what other cases left on the "
                                    f"server", reproduced=False)))
    return out


def jsonable(obj: Any) -> Any:
    """A decoded reply as JSON-able data for a transcript (bytes as ``{"bin": hex}``)."""
    if hasattr(obj, "as_dict"):
        return obj.as_dict()
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, (bytes, bytearray)):
        return {"bin": bytes(obj).hex()}
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    return repr(obj)


# the async faces, for callers on an event loop (an in-process server keeps serving)
async def run_fresh(protocol: str, profile: str, host: str, port: int, case: Case,
                    bound: float = DEFAULT_BOUND, auth_token: str | None = None) -> Result:
    return await asyncio.to_thread(run_fresh_sync, protocol, profile, host, port, case, bound,
                                   auth_token)


async def shrink_and_save(res: Result, host: str, port: int, artifacts: str | None,
                          bound: float = DEFAULT_BOUND,
                          auth_token: str | None = None) -> Saved:
    return await asyncio.to_thread(shrink_and_save_sync, res, host, port, artifacts, bound,
                                   auth_token)


async def replay(case: Case, host: str, port: int, bound: float = DEFAULT_BOUND,
                 auth_token: str | None = None) -> Result:
    """Run a transcript's case again on a fresh connection: FIXED when nothing fails."""
    return await run_fresh(case.protocol, case.profile, host, port, case, bound, auth_token)

