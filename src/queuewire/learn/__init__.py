"""``queuewire.learn``: learn a server's state machine from outside and compare it with the
spec's table (issue 29): bunqueue's job lifecycle and auth session, quicx's task dialogue.

What it is
----------
The spec's state tables say which transitions a server makes; the learner asks a live server
and infers the Mealy machine it implements (AALpy's L* with a random W-method equivalence
oracle, bounded and reproducible from a seed), then compares it with the machine the table
implies as machines: :func:`~.machine.difference` gives the shortest input sequence whose
outputs differ, or None when the two are equivalent.

Rooms
-----
:mod:`.machine` holds the machines (the job lifecycle's, built from its ``learn`` section of
``spec/``, and the comparison); :mod:`.dialogue` the machines of dialogue tables (rows that say
what each connection receives); :mod:`.subject` one face over both kinds (:class:`Learnable`);
:mod:`.cases` and :mod:`.dialogue_cases` turn a difference into a conformance case;
:mod:`.sul` (the job lifecycle) and :mod:`.wire` (dialogues, quicx and bunqueue) drive a
server over TCP for AALpy, within a query and time budget; :mod:`.render` draws the machines
(Mermaid, Graphviz).
"""

from __future__ import annotations

from .dialogue import Dialogue, dialogue_machine, dialogue_section
from .machine import Learn, Mealy, difference, differences, learn_section, spec_machine
from .subject import Difference, Learnable
from .sul import BudgetExhausted, JobSUL, Learned, learn_machine

__all__ = ["BudgetExhausted", "Dialogue", "Difference", "JobSUL", "Learn", "Learnable", "Learned",
           "Mealy", "dialogue_machine", "dialogue_section", "difference", "differences",
           "learn_machine", "learn_section", "spec_machine"]
