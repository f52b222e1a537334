"""The known-failing file: the case ids a user expects to fail on their server, with reasons.

A CI gate needs to accept today's deviations without hiding tomorrow's: a listed case that
fails is reported but does not fail the run, and a listed case that passes does (the list
went stale). The CLI (``--known-failing``) and the pytest plugin
(``--queuewire-known-failing``) read the same format, parsed here once.
"""

from __future__ import annotations

import re

KNOWN_FAILING_HELP = (
    "File of case ids expected to fail (your server's known deviations): one id per line; "
    "'#' starts a comment, and text after the id (or a comment on its line) is the reason. "
    "YAML works too: a list ('- bunqueue.push.x  # reason') or a mapping "
    "('bunqueue.push.x: reason'). A listed case that fails is reported but does not fail the "
    "run; a listed case that PASSES fails the run (the list went stale: remove the entry).")


_CASE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.\-/]*")


def parse_known_failing(text: str, source: str) -> dict[str, str]:
    """Case id -> reason from a known-failing file (format: ``KNOWN_FAILING_HELP``)."""
    out: dict[str, str] = {}
    for n, raw in enumerate(text.splitlines(), 1):
        line, _, comment = raw.partition("#")
        line = line.strip()
        if not line or line in ("---", "known_failing:", "known-failing:"):
            continue
        if line.startswith("- "):
            line = line[2:].strip()
        case_id, sep, rest = line.partition(":") if ": " in line or line.endswith(":") \
            else line.partition(" ")
        case_id = case_id.strip().strip("'\"")
        if not _CASE_ID.fullmatch(case_id):
            raise ValueError(f"{source}:{n}: expected a case id, got {raw.strip()!r}")
        reason = (rest.strip().strip("'\"") or comment.strip())
        out[case_id] = reason
    return out


def read_known_failing(path: str) -> dict[str, str]:
    """``parse_known_failing`` of a file; ValueError (one line) when it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read known-failing file {path}: {exc}") from None
    return parse_known_failing(text, path)
