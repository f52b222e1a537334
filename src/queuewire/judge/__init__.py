"""The judge: what queuewire's tools say about a peer, in one vocabulary.

Rules
-----
* One :class:`~queuewire.judge.verdicts.Verdict` vocabulary for every tool: ``conform``
  (server and client), the fuzz oracles, the tap and the trace pipeline say ``FAIL``,
  ``NON-STRICT`` and ``INFO`` for the same thing. A case's verdict adds ``PASS``,
  ``UNIMPLEMENTED`` and ``ERROR``.
* One mapping from a requirement's level and basis to a verdict
  (:func:`~queuewire.judge.verdicts.verdict_for`): a MUST the documents state FAILs, a SHOULD
  or a reading or a queuewire decision is NON-STRICT, a MAY or silence is INFO. No module
  decides a level on its own (spec/README.md, "Levels and basis").

Design
------
The judge sits between the codecs and the tools (import-linter's layers in pyproject.toml):
it reads the spec's requirements and the codecs' values and nothing above them, and every tool
imports its verdicts and its reqId identity from here.

Seams
-----
:mod:`queuewire.judge.verdicts` is the vocabulary and the mapping; :mod:`queuewire.judge.reqid`
the one rule of when two reqIds are the same, by which every tool pairs a reply with its
request; :mod:`queuewire.judge.opening` how a client opens a connection (Hello first);
:mod:`queuewire.judge.findings` the one :class:`~queuewire.judge.findings.Finding` every tool
reports (the tap, the trace pipeline, the fuzz oracles); :mod:`queuewire.judge.exchange` the
registry of bunqueue frame checks (``CHECKS``) and the one connection judge that applies them,
:class:`~queuewire.judge.exchange.BunqueueExchange`, through which the tap, the trace pipeline,
``conform client``'s checker and the fuzz oracles all judge (``tests/judge/test_one_registry.py``
feeds one exchange to the four and holds them to the same findings).
"""

from .findings import Finding
from .opening import OPENING_RULE, opens_with_hello
from .reqid import reqid_key
from .verdicts import FINDING_VERDICTS, Verdict, level_for, reading, requirement_verdict, verdict_for

__all__ = ["FINDING_VERDICTS", "OPENING_RULE", "Finding", "Verdict", "level_for", "opens_with_hello",
           "reading", "reqid_key", "requirement_verdict", "verdict_for"]
