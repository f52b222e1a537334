"""The system under learning: a bunqueue server over TCP, driven one job at a time.

What it is
----------
:class:`JobSUL` is AALpy's ``SUL`` (reset, step) over a live server: a query starts on a fresh
queue (so the server is never restarted and no query sees another's job), each input sends the
request its ``learn`` entry gives (with the variables saved so far), and the output is the
reply's class (``ok`` / ``error``; ``-`` when the input was not sent because a variable it
needs was never saved) and the job's state as ``observe`` reads it. After the query the queue
is obliterated: nothing is left on the target. Answers are cached by AALpy (the same query is
not sent twice); :attr:`JobSUL.sent` counts the requests that did go out.

Design
------
Blocking sockets on purpose: AALpy drives the SUL synchronously, so :func:`learn` runs it in a
worker thread (``asyncio.to_thread``) when the target is an embedded server in the caller's
loop. Requests go through :meth:`.wire.BunqueueWire.request` (the codecs, a deadline per
reply, a pushed frame without reqId skipped), as the dialogues' do.
"""

from __future__ import annotations

import itertools
import random
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aalpy.base import SUL
from aalpy.learning_algs import run_Lstar
from aalpy.oracles import RandomWMethodEqOracle

from ..spec import Profile
from .dialogue import Dialogue
from .machine import NONE, NOT_SENT, Learn, Mealy, needs
from .wire import BunqueueWire, DialogueSUL, QuicxWire, fill

__all__ = ["Bounded", "BudgetExhausted", "JobSUL", "Learned", "learn_machine", "learn_sul"]


class JobSUL(SUL):  # type: ignore[misc]
    """A bunqueue server at ``host:port`` seen through a state table's ``learn`` section."""

    def __init__(self, profile: Profile, host: str, port: int, learn: Learn, *,
                 timeout: float = 5.0, token: str | None = None):
        super().__init__()
        self.learn = learn
        self.wire = BunqueueWire(profile, host, port, timeout)
        self.conn = self.wire.open("client")
        self._run = uuid.uuid4().hex[:8]
        self._query = itertools.count(1)
        self.vars: dict[str, str] = {}
        self.errors = profile.model.errors
        if token is not None:   # a server with tokens: the connection authenticates first
            reply = self._call({"cmd": "Auth", "token": token})
            if reply.get("ok") is not True:
                self.close()
                raise PermissionError(f"the target refused the token: {reply.get('error')}")

    @property
    def sent(self) -> int:
        """Requests sent to the target."""
        return self.wire.sent

    def close(self) -> None:
        self.wire.close(self.conn)

    def _call(self, request: Mapping[str, Any]) -> dict[str, Any]:
        return self.wire.request(self.conn, request)

    # -- AALpy's SUL
    def pre(self) -> None:
        self.vars = {"queue": f"qw-learn-{self._run}-{next(self._query)}"}

    def post(self) -> None:
        self._call({"cmd": "Obliterate", "queue": self.vars["queue"]})

    def step(self, letter: str | None) -> str:
        if letter is None:
            return self._observed(NOT_SENT)
        entry = self.learn.inputs[letter]
        creates = entry.get("creates")
        if not needs(entry) <= set(self.vars) or (creates is not None and "job" in self.vars):
            return self._observed(NOT_SENT)
        reply = self._call(fill(entry["send"], self.vars))
        ok = reply.get("ok") is True
        if ok:
            for var, reply_field in (entry.get("saves") or {}).items():
                value = reply.get(reply_field)
                if isinstance(value, str) and value:
                    self.vars[var] = value
        return self._observed("ok" if ok else "error")

    def _observed(self, reply_class: str) -> str:
        """The output: the reply class, the job's state and each lookup's answer."""
        state = self._state()
        if "job" not in self.vars:
            return self.learn.output(reply_class, state)
        found = []
        for name in sorted(self.learn.lookups):
            reply = self._call(fill(self.learn.lookups[name]["send"], self.vars))
            job = reply.get("job") if reply.get("ok") is True else None
            found.append("found" if isinstance(job, dict) and job.get("id") == self.vars["job"]
                         else "not found")
        return self.learn.output(reply_class, state, found)

    def _state(self) -> str:
        if "job" not in self.vars:
            return NONE
        observe = self.learn.observe
        reply = self._call(fill(observe["send"], self.vars))
        if reply.get("ok") is not True:   # the job is gone, if the refusal says so
            error = self.errors.get(str((observe.get("gone") or {}).get("error")))
            gone = error is not None and error.pattern.fullmatch(str(reply.get("error"))) is not None
            return (self.learn.gone if gone else None) or "refused"
        return str(reply.get(observe["field"], "unknown"))


@dataclass
class Learned:
    machine: Mealy
    queries: int          # membership queries AALpy asked (cached ones not repeated)
    requests: int         # requests sent to the target
    seconds: float


class BudgetExhausted(RuntimeError):
    """The run spent its query or time budget before the learner was done."""


class Bounded(SUL):  # type: ignore[misc]
    """A SUL within a budget: ``max_queries`` queries and ``max_seconds`` seconds (None: no
    bound), calling ``progress(queries, requests, seconds)`` at most every ``every`` seconds
    (none in the first)."""

    def __init__(self, inner: Any, *, max_queries: int | None = None,
                 max_seconds: float | None = None, progress: Any = None, every: float = 5.0):
        super().__init__()
        self.inner, self.max_queries, self.max_seconds = inner, max_queries, max_seconds
        self.progress, self.every = progress, every
        self.started = time.monotonic()
        self.shown = self.started
        self.count = 0

    def pre(self) -> None:
        self.count += 1
        spent = time.monotonic() - self.started
        if self.max_queries is not None and self.count > self.max_queries:
            raise BudgetExhausted(f"the query budget ({self.max_queries}) is spent")
        if self.max_seconds is not None and spent > self.max_seconds:
            raise BudgetExhausted(f"the time budget ({self.max_seconds:g} s) is spent after "
                                  f"{self.count - 1} queries")
        if self.progress is not None and spent - (self.shown - self.started) >= self.every:
            self.shown = time.monotonic()
            self.progress(self.count, self.inner.sent, spent)
        self.inner.pre()

    def post(self) -> None:
        self.inner.post()

    def step(self, letter: str | None) -> str:
        if self.max_seconds is not None and time.monotonic() - self.started > self.max_seconds:
            raise BudgetExhausted(f"the time budget ({self.max_seconds:g} s) is spent in "
                                  f"query {self.count}")
        return str(self.inner.step(letter))


def learn_sul(sul: Any, alphabet: list[str], *, seed: int = 0, walks_per_state: int = 20,
              walk_len: int = 8, max_rounds: int = 30, max_queries: int | None = None,
              max_seconds: float | None = None, progress: Any = None) -> Learned:
    """Learn ``sul``'s machine over ``alphabet`` with L* (AALpy) and a random W-method
    equivalence oracle, within the budget; reproducible from ``seed``. ``sul`` has ``sent``
    (requests that went out) and ``close()``."""
    random.seed(seed)
    bounded = Bounded(sul, max_queries=max_queries, max_seconds=max_seconds, progress=progress)
    started = time.monotonic()
    try:
        oracle = RandomWMethodEqOracle(alphabet, bounded, walks_per_state=walks_per_state,
                                       walk_len=walk_len)
        model = run_Lstar(alphabet, bounded, oracle, automaton_type="mealy", print_level=0,
                          max_learning_rounds=max_rounds)
    finally:
        sul.close()
    machine = Mealy(model.initial_state.state_id, tuple(alphabet))
    for state in model.states:
        for letter in alphabet:
            machine.table[(state.state_id, letter)] = (state.output_fun[letter],
                                                       state.transitions[letter].state_id)
    return Learned(machine, bounded.num_queries, sul.sent, time.monotonic() - started)


def learn_machine(profile: Profile, host: str, port: int, section: Any, *,
                  token: str | None = None, timeout: float = 5.0, **budget: Any) -> Learned:
    """Learn the target's machine for ``section`` (a job table's :class:`~.machine.Learn` or
    a :class:`~.dialogue.Dialogue`); ``token`` authenticates (and is ``${token}``);
    ``timeout``: seconds to wait for an answer."""
    sul: Any
    if isinstance(section, Dialogue):
        wire = (QuicxWire if profile.protocol == "quicx" else BunqueueWire)(profile, host, port,
                                                                             timeout)
        variables = {"wrong_token": f"qw-learn-not-{uuid.uuid4().hex}"}
        if token is not None:
            variables["token"] = token
        sul = DialogueSUL(section, wire, variables)
    else:
        sul = JobSUL(profile, host, port, section, token=token, timeout=timeout)
    return learn_sul(sul, sorted(section.inputs), **budget)
