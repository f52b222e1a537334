"""The one verdict vocabulary, and the one mapping from a requirement to a verdict.

spec/README.md ("Levels and basis") is the policy this module writes down once: a FAIL rests
on a MUST the documents state; a SHOULD, or any requirement that is a reading (``implied``)
or a queuewire ``decision``, is NON-STRICT when not followed, never more; a MAY, and what the
documents are silent on, is INFO. ``spec lint`` refuses a MUST whose basis is not ``stated``;
:func:`verdict_for` caps it anyway, so that no spec edit can make a reading FAIL a peer.
"""

from __future__ import annotations

import enum

from ..spec import Profile
from ..spec.model import Basis, Level


class Verdict(enum.StrEnum):
    """What a tool says: about one finding (FAIL, NON-STRICT, INFO) or one case (all six)."""

    PASS = "PASS"
    NON_STRICT = "NON-STRICT"  # a SHOULD (or a reading, or a decision) not followed
    FAIL = "FAIL"  # a MUST the documents state, violated
    UNIMPLEMENTED = "UNIMPLEMENTED"  # the target does not know the command
    INFO = "INFO"  # observation only: a MAY, or the documents are silent
    ERROR = "ERROR"  # the run itself broke


#: The verdicts a single finding can have, the most severe first (the order of report columns).
FINDING_VERDICTS: tuple[Verdict, ...] = (Verdict.FAIL, Verdict.NON_STRICT, Verdict.INFO)

_BY_LEVEL = {"MUST": Verdict.FAIL, "SHOULD": Verdict.NON_STRICT, "MAY": Verdict.INFO}
_LEVEL_OF = {verdict: level for level, verdict in _BY_LEVEL.items()}


def level_for(verdict: Verdict) -> str:
    """The level a finding of ``verdict`` carries as one of conform's checks (MUST for FAIL,
    SHOULD for NON-STRICT, MAY for INFO): the inverse of :func:`verdict_for` on a stated
    requirement, so a check's level maps back to the finding's verdict."""
    return _LEVEL_OF[verdict]


def verdict_for(level: Level | str | None, basis: Basis | str | None = "stated") -> Verdict:
    """The verdict of a finding against a requirement of ``level`` resting on ``basis``:
    FAIL for a stated MUST, NON-STRICT for a SHOULD or a MUST that is not stated, INFO for a
    MAY or no level at all."""
    verdict = _BY_LEVEL.get(level or "", Verdict.INFO)
    if verdict is Verdict.FAIL and basis not in (None, "stated"):
        return Verdict.NON_STRICT
    return verdict


def reading(verdict: Verdict) -> Verdict:
    """The verdict of a finding that rests on a reading of the rule it cites (the rule is
    stated, but that it applies here is queuewire's reading): never more than NON-STRICT."""
    return Verdict.NON_STRICT if verdict is Verdict.FAIL else verdict


def requirement_verdict(profile: Profile, requirement: str | None) -> Verdict:
    """The verdict of a finding that cites ``requirement`` in ``profile`` (INFO when it cites
    none, or one the profile does not know)."""
    req = profile.requirements.get(requirement) if requirement else None
    if req is None:
        return Verdict.INFO
    return verdict_for(req.level, req.basis)
