"""``queuewire.learn``: learn a server's state machine from outside and compare it with the
spec's table (issue 29; the first part: the bunqueue job lifecycle).

What it is
----------
The spec's state tables say which transitions a server makes; the learner asks a live server
and infers the Mealy machine it implements (AALpy's L* with a random W-method equivalence
oracle, bounded and reproducible from a seed), then compares it with the machine the table
implies as machines: :func:`~.machine.difference` gives the shortest input sequence whose
outputs differ, or None when the two are equivalent.

Rooms
-----
:mod:`.machine` holds the machines (the spec's, built from a table's ``learn`` section of
``spec/``, and the comparison); :mod:`.sul` drives a server over TCP for AALpy and turns its
answers into a machine.
"""

from __future__ import annotations

from .machine import Learn, Mealy, difference, differences, learn_section, spec_machine
from .sul import JobSUL, Learned, learn_machine

__all__ = ["JobSUL", "Learn", "Learned", "Mealy", "difference", "differences", "learn_machine",
           "learn_section", "spec_machine"]
