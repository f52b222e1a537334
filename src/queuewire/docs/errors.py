"""The error replies of each command (bunqueue) and message (quicx), for their entries on
the command and message pages, derived from the spec's data.

Design: the spec lists its errors (bunqueue ``errors``; quicx ``protocol_errors`` with the
``error_codes`` they answer) but not, for each, the commands that get it: an error's
``doc`` says when it is given, in words that name the commands. The links are read from
that data and from the packaged conformance cases, never written here.

bunqueue
  An error belongs to the commands its ``doc`` names (a command's name as a whole word);
  where the doc's list of them is left open (it ends in ``...``), also to those the text of
  its requirement names; and to a command a packaged conformance case sends expecting that
  error in reply (``expect: {error: NAME}``). An error whose ``doc`` names commands only
  after "other than", or names none and no case ties to one, is answered before a command
  is looked at (framing, envelope, authentication, the rate limit, the HTTP shell): every
  command but the ones named after "other than" can get it.

quicx
  The daemon answers with MSG_ERROR (the message whose layout carries the ``error_codes``
  enum), which goes back to a message's sender. A decoder error kind whose reaction is
  ``reply`` belongs to a message its layout names it on (``errors`` of the message or of a
  field: a check of the message's receiver, so answered only where that is the daemon), or
  whose ``doc`` names the message (MSG_ERROR itself is named there as the answer, never as
  the refused message). A kind whose ``doc`` names only messages the daemon does not
  receive is what the daemon answers when one arrives anyway (the wrong direction, a
  reserved opcode); one that also names a message the daemon receives is about that one
  (MSG_SUBMIT's task, "its MSG_TASK body", too large). The kinds
  tied to no message are the header's and the layout's general checks, which any frame
  sent to the daemon can meet, whatever its message.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..spec.quicx import DAEMON

OPEN_LIST = re.compile(r"(\.\.\.|…)\s*\)")
EXCEPT = re.compile(r"other than\s+(\w+(?:(?:\s*,\s*|\s+(?:or|and)\s+)\w+)*)")


@dataclass(frozen=True)
class ErrorLinks:
    """Which errors a command or message can be answered with: ``specific[name]`` (the
    error names tied to it, in spec order) and ``general`` (those any request can get), with
    ``excluded[error]`` the commands or messages a general error never applies to."""

    specific: Mapping[str, tuple[str, ...]]
    general: tuple[str, ...]
    excluded: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: messages the daemon does not receive in their own direction (quicx): their errors
    #: are what the daemon answers when one arrives anyway
    unanswered: frozenset[str] = frozenset()

    def of(self, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """(specific, general) error names of command or message ``name``."""
        return (self.specific.get(name, ()),
                tuple(e for e in self.general if name not in self.excluded.get(e, ())))


def named(text: str, names: Iterable[str]) -> tuple[set[str], set[str]]:
    """The ``names`` that ``text`` names as whole words: (named, named after "other than")."""
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text))
    found = {n for n in names if n in words}
    excepted = {w for m in EXCEPT.finditer(text)
                for w in re.findall(r"\w+", m.group(1)) if w in found}
    return found - excepted, excepted


def _case_links(protocol: str, profile_name: str) -> dict[str, set[str]]:
    """error name -> the commands a packaged case sends expecting that error in reply."""
    from ..conformance.runner import load_cases

    links: dict[str, set[str]] = {}

    def walk(steps: Iterable[Any]) -> None:
        for step in steps:
            if not isinstance(step, Mapping):
                continue
            send, expect = step.get("send"), step.get("expect")
            outcomes: list[Any] = []
            if isinstance(expect, Mapping):
                alternatives = expect.get("any_of")
                outcomes = list(alternatives) if isinstance(alternatives, list) else [expect]
            for outcome in outcomes:
                if (isinstance(send, Mapping) and isinstance(send.get("cmd"), str)
                        and isinstance(outcome, Mapping) and isinstance(outcome.get("error"), str)):
                    links.setdefault(outcome["error"], set()).add(send["cmd"])
            if isinstance(step.get("pipeline"), list):
                walk(step["pipeline"])

    for case in load_cases(protocol, profile_name):
        walk(case.steps)
    return links


def bunqueue_links(profile: Any) -> ErrorLinks:
    """The error replies of every command of a bunqueue profile (see the module doc)."""
    commands = list(profile.model.commands)
    cases = _case_links("bunqueue", profile.name)
    specific: dict[str, list[str]] = {c: [] for c in commands}
    general: list[str] = []
    excluded: dict[str, frozenset[str]] = {}
    for error in profile.model.errors.values():
        found, excepted = named(error.doc, commands)
        if found and OPEN_LIST.search(error.doc):
            req = profile.requirements.get(error.requirement)
            found |= named(req.text, commands)[0] if req is not None else set()
        if not excepted:
            found |= cases.get(error.name, set()) & set(commands)
        if found and not excepted:
            for cmd in commands:
                if cmd in found:
                    specific[cmd].append(error.name)
        else:
            general.append(error.name)
            excluded[error.name] = frozenset(excepted)
    return ErrorLinks({c: tuple(v) for c, v in specific.items() if v}, tuple(general), excluded)


def error_message(spec: Any) -> Any:
    """The message that carries an error code (its layout has the ``error_codes`` enum)."""
    return next((m for m in spec.messages.values()
                 if any(f.enum == "error_codes" for f in m.layout)), None)


def quicx_links(profile: Any) -> ErrorLinks:
    """The MSG_ERROR replies of every message of a quicx profile (see the module doc)."""
    spec = profile.model
    carrier = error_message(spec)
    answered = {r for s, r in carrier.directions if s == DAEMON} if carrier else set()
    received = {m.name for m in spec.messages.values() if not m.reserved
                and any(r == DAEMON and s in answered for s, r in m.directions)}
    replied = [k for k in spec.protocol_errors.values() if k.reaction == "reply" and k.error_code]
    others = [m for m in spec.messages if carrier is None or m != carrier.name]
    specific: dict[str, list[str]] = {}
    tied: set[str] = set()
    for msg in spec.messages.values():
        layout = set(msg.errors.values()) | {k for f in msg.layout for k in f.errors.values()}
        for kind in replied:
            by_layout, by_doc = kind.name in layout, named(kind.doc, others)[0]
            if not by_layout and msg.name not in by_doc:
                continue
            tied.add(kind.name)
            # a layout check is its receiver's; a kind naming only messages the daemon does
            # not receive is the daemon's answer when one arrives anyway
            answers = msg.name in received or (not by_layout and not by_doc & received)
            if answers:
                specific.setdefault(msg.name, []).append(kind.name)
    general = tuple(k.name for k in replied if k.name not in tied)
    unanswered = frozenset(m for m in spec.messages if m not in received)
    return ErrorLinks({m: tuple(v) for m, v in specific.items()}, general,
                      unanswered=unanswered)
