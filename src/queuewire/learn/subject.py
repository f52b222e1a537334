"""One learnable state table of a profile, whatever its kind: :class:`Learnable`.

What it is
----------
The spec has two kinds of tables a learner drives: the job lifecycle (a job's state observed
through a request, :mod:`.machine` and :mod:`.cases`) and dialogues (what each connection
receives, :mod:`.dialogue` and :mod:`.dialogue_cases`). :class:`Learnable` gives the tools one
face over both: the section to learn with, the machine the table implies, the differences
between it and a learned one, and for each difference the requirement that decides it (with
its level) and the conformance case that replays it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from .cases import deciding_rule, difference_case
from .dialogue import Dialogue, dialogue_section, is_dialogue
from .dialogue_cases import dialogue_case, dialogue_rule
from .machine import Learn, Mealy, differences, learn_section, needs, spec_machine

__all__ = ["Difference", "Learnable"]


@dataclass(frozen=True)
class Difference:
    """A shortest input word after which the server leaves the table, both machines' outputs
    for it, the requirement (with its level) it is judged by and the case that replays it."""

    word: list[str]
    spec: list[str]
    server: list[str]
    requirement: str
    level: str
    case: dict[str, Any]

    @property
    def rule(self) -> str:
        return f"{self.requirement} ({self.level})"


@dataclass(frozen=True)
class Learnable:
    """A profile's state table ``machine`` with its learn section."""

    profile: Any
    machine: str
    section: Learn | Dialogue
    table: Mealy

    @classmethod
    def of(cls, profile: Any, machine: str) -> Learnable:
        if is_dialogue(profile.tree, machine):
            d = dialogue_section(profile.tree, machine)
            return cls(profile, machine, d, d.implied)
        learn = learn_section(profile.tree, machine)
        return cls(profile, machine, learn, spec_machine(learn))

    @property
    def needs_token(self) -> bool:
        """Whether an input sends ``${token}`` (the server's auth token)."""
        return any("token" in needs(entry) for entry in self.section.inputs.values())

    def differences(self, learned: Mealy) -> list[Difference]:
        out = []
        for word, spec_out, server_out in differences(self.table, learned):
            out.append(self.difference(word, spec_out, server_out))
        return out

    def difference(self, word: Sequence[str], spec_out: Sequence[str],
                   server_out: Sequence[str]) -> Difference:
        s = self.section
        if isinstance(s, Dialogue):
            rid, cap = dialogue_rule(s, word)
            case = dialogue_case(s, self.profile.protocol, word, spec_out, server_out)
        else:
            rid, cap = deciding_rule(s, word, spec_out, server_out)
            case = difference_case(s, word, spec_out, server_out)
        req = self.profile.requirements.get(rid)
        level = cap or (req.level if req is not None else "-")
        return Difference(list(word), list(spec_out), list(server_out), rid, level, case)
