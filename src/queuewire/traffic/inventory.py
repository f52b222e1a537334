"""What a server keeps, what a test run left on it, and whether the run broke it: sans-IO.

A tool that sends a server many commands (``conform server``, ``fuzz``) must leave it as it
found it and must say when a command broke it. This module does the bookkeeping and owns no
socket: it builds request maps (without ``reqId``) and reads the decoded reply maps its caller
got for them, so any connection can drive it. Which commands list and remove what is the
profile's ``resources`` section (spec/README.md, :mod:`queuewire.spec.resources`).

Inventory
    :class:`Survey` takes an inventory in rounds: :meth:`Survey.requests` gives the next
    requests (first the server-wide lists, then one list per queue for the kinds held in a
    queue), :meth:`Survey.feed` takes one reply per request (None: no reply), until
    :attr:`Survey.done`; :meth:`Survey.result` is the :class:`Inventory`. :func:`take` and
    :func:`take_async` run the rounds over an ``exchange`` callable (requests -> replies).
    What could not be listed is kept with the reason (``Inventory.unlisted``).

Removal
    :func:`removals` are the requests that remove what appeared between two inventories, in
    the order of the spec's kinds (a webhook before the queue it names); a thing held in a
    queue that appeared goes with that queue. :func:`settle` compares a third inventory, taken
    after the removals, with the first: what is still there is :class:`Left` with the reason
    it could not be removed, and the rest of what appeared is removed (:class:`Residue`).

Health
    :func:`probe_requests` are cheap requests a healthy server answers ok (the server-wide list
    commands and the spec's ``probes``); :func:`probe_results` reads their replies.
    :class:`HealthWatch` keeps each probe's state over a run: a probe that answered ok and
    then fails is a :class:`Break`, blamed on the units (cases, fuzz examples) that were
    running at some time between the last answer that was ok and the failing one (units run
    concurrently; the caller reports when each starts and ends, with its own clock).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..spec.resources import ResourceKind, Resources

__all__ = ["Break", "HealthWatch", "Inventory", "Item", "Left", "Removal", "Residue", "Survey",
           "probe_requests", "probe_results", "removals", "settle", "take", "take_async"]

Request = dict[str, Any]
Exchange = Callable[[list[Request]], Sequence[Any]]
AsyncExchange = Callable[[list[Request]], Awaitable[Sequence[Any]]]
SHOWN_UNITS = 8  # a Break's text names at most this many units


def ident(value: Any) -> tuple[str, str]:
    """A hashable identity of a key as the server sent it: ``True``, ``1`` and ``"1"`` are
    three queues (Python's ``True == 1`` must not merge them)."""
    return type(value).__name__, repr(value)


def brief(value: Any, limit: int = 60) -> str:
    """A key as a report shows it: its repr, a long one cut (a 257-character queue name)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit - 20]}...{text[-8:]} ({len(str(value))} chars)"


@dataclass(frozen=True)
class Item:
    """One thing the server keeps: of ``kind``, named ``key`` as the server sent it, held in
    the item ``parent`` of the kind's ``within`` kind (None for a server-wide kind).
    ``count``: for a counted kind, how many (jobs in the state ``key``). ``detail``: the
    fields the spec's ``show`` names, for reports."""

    kind: str
    key: Any
    parent: Any = None
    count: int | float | None = None
    detail: Mapping[str, Any] = field(default_factory=dict, compare=False)

    @property
    def ident(self) -> tuple[Any, ...]:
        return self.kind, ident(self.parent), ident(self.key)

    def text(self) -> str:
        """One line: ``webhooks 'ab12' (url='https://...', queue='')``."""
        where = f" in {brief(self.parent)}" if self.parent is not None else ""
        if self.count is not None:
            return f"{self.count:g} {self.kind} {self.key}{where}"
        shown = ", ".join(f"{k}={brief(v, 40)}" for k, v in self.detail.items())
        return f"{self.kind} {brief(self.key)}{where}" + (f" ({shown})" if shown else "")

    def jsonable(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "key": _plain(self.key)}
        if self.parent is not None:
            out["parent"] = _plain(self.parent)
        if self.count is not None:
            out["count"] = _plain(self.count)
        if self.detail:
            out["detail"] = {k: _plain(v) for k, v in self.detail.items()}
        out["text"] = self.text()
        return out


def _plain(value: Any) -> Any:
    """JSON data for a key or detail (a float that JSON cannot hold, bytes, ... as text)."""
    if isinstance(value, bool | int | str) or value is None:
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else repr(value)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    return repr(value)


@dataclass
class Inventory:
    """What a server held when listed: items by identity, and what could not be listed
    (``"dlq in 'emails'"`` -> the reason)."""

    items: dict[tuple[Any, ...], Item] = field(default_factory=dict)
    unlisted: dict[str, str] = field(default_factory=dict)

    def of(self, kind: str) -> list[Item]:
        return [i for i in self.items.values() if i.kind == kind]

    def new_since(self, before: Inventory) -> list[Item]:
        """What is here and was not in ``before``: a new item, or for a counted kind the
        growth of a count (an item whose ``count`` is the difference)."""
        out = []
        for key, item in self.items.items():
            old = before.items.get(key)
            if item.count is None:
                if old is None:
                    out.append(item)
                continue
            was = (old.count or 0) if old is not None else 0
            if item.count > was:
                out.append(Item(item.kind, item.key, item.parent, item.count - was, item.detail))
        return out

    def listed(self, kind: ResourceKind, parent: Any = None) -> bool:
        """Whether ``kind`` (in ``parent``) was listed, i.e. its absence here means absence."""
        return _where(kind, parent) not in self.unlisted


def _where(kind: ResourceKind, parent: Any) -> str:
    return kind.name if kind.within is None else f"{kind.name} in {brief(parent)}"


def reply_error(reply: Any) -> str | None:
    """None for an ok reply map; else what it was, in a few words."""
    if reply is None:
        return "no reply"
    if not isinstance(reply, Mapping):
        return f"not a reply map: {brief(reply)}"
    if reply.get("ok") is True:
        return None
    err = reply.get("error")
    return f"error {err!r}" if isinstance(err, str) else f"not ok: {brief(dict(reply), 120)}"


def path_get(value: Any, path: str) -> Any:
    """The value at dotted ``path`` of a reply map; KeyError when a part is missing."""
    node = value
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            raise KeyError(path)
        node = node[part]
    return node


class Survey:
    """One inventory, taken in rounds (see the module docstring). ``kinds`` limits it to the
    named kinds (and the kinds within them)."""

    def __init__(self, resources: Resources, kinds: Iterable[str] | None = None) -> None:
        wanted = set(kinds) if kinds is not None else None
        self.resources = resources
        self.inventory = Inventory()
        self._kinds = [k for k in resources.kinds.values() if wanted is None or k.name in wanted
                       or (k.within is not None and k.within in wanted)]
        self._pending: list[tuple[ResourceKind, Any]] = []
        self._round = 0

    @property
    def done(self) -> bool:
        return self._round >= 2 and not self._pending

    def requests(self) -> list[Request]:
        """The next round's requests (empty when the survey is done); feed their replies
        before asking again."""
        if self._pending:
            raise RuntimeError("feed the replies of the last round first")
        while not self._pending and self._round < 2:
            if self._round == 0:
                self._pending = [(k, None) for k in self._kinds if k.within is None]
            else:
                self._pending = [(k, parent.key) for k in self._kinds if k.within is not None
                                 for parent in self.inventory.of(k.within)]
            self._round += 1
        return [self._request(kind, parent) for kind, parent in self._pending]

    @staticmethod
    def _request(kind: ResourceKind, parent: Any) -> Request:
        req: Request = {"cmd": kind.list_cmd}
        if kind.parent is not None:
            req[kind.parent] = parent
        return req

    def feed(self, replies: Sequence[Any]) -> None:
        if len(replies) != len(self._pending):
            raise ValueError(f"{len(replies)} replies for {len(self._pending)} requests")
        for (kind, parent), reply in zip(self._pending, replies):
            self._read(kind, parent, reply)
        self._pending = []

    def _read(self, kind: ResourceKind, parent: Any, reply: Any) -> None:
        where = _where(kind, parent)
        err = reply_error(reply)
        if err is not None:
            self.inventory.unlisted[where] = f"{kind.list_cmd}: {err}"
            return
        path = str(kind.items if kind.items is not None else kind.counts)
        try:
            found = path_get(reply, path)
        except KeyError:
            self.inventory.unlisted[where] = f"{kind.list_cmd}: the reply has no {path}"
            return
        items = self.inventory.items
        if kind.counts is not None:
            if not isinstance(found, Mapping):
                self.inventory.unlisted[where] = f"{kind.list_cmd}: {path} is not a map"
                return
            for state, n in found.items():
                if isinstance(n, int | float) and not isinstance(n, bool):
                    item = Item(kind.name, state, parent, n)
                    items[item.ident] = item
            return
        if not isinstance(found, list):
            self.inventory.unlisted[where] = f"{kind.list_cmd}: {path} is not a list"
            return
        for entry in found:
            if isinstance(entry, Mapping):  # a map names itself by its key field
                if kind.key not in entry:
                    self.inventory.unlisted[where] = \
                        f"{kind.list_cmd}: an item of {path} has no {kind.key}"
                    continue
                key = entry[kind.key]
                detail = {f: entry[f] for f in kind.show if f in entry}
            else:  # anything else is its own key (bunqueue 2.9.5 lists bare queue names)
                key, detail = entry, {}
            item = Item(kind.name, key, parent, None, detail)
            items[item.ident] = item

    def result(self) -> Inventory:
        if not self.done:
            raise RuntimeError("the survey is not done")
        return self.inventory


def take(resources: Resources, exchange: Exchange, kinds: Iterable[str] | None = None
         ) -> Inventory:
    """An inventory over a blocking ``exchange`` (a list of requests -> one reply each)."""
    survey = Survey(resources, kinds)
    while not survey.done:
        reqs = survey.requests()
        survey.feed(list(exchange(reqs)) if reqs else [])
    return survey.result()


async def take_async(resources: Resources, exchange: AsyncExchange,
                     kinds: Iterable[str] | None = None) -> Inventory:
    """An inventory over an async ``exchange``."""
    survey = Survey(resources, kinds)
    while not survey.done:
        reqs = survey.requests()
        survey.feed(list(await exchange(reqs)) if reqs else [])
    return survey.result()


# -- removal ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Removal:
    """The request that removes ``item``."""

    item: Item
    request: Request = field(compare=False)


def _top_level(resources: Resources, items: Iterable[Item]) -> list[Item]:
    """``items`` without those held in an item also among them (they go with it)."""
    items = list(items)
    idents = {i.ident for i in items}
    out = []
    for item in items:
        kind = resources.kinds.get(item.kind)
        if kind is not None and kind.within is not None and \
                (kind.within, ident(None), ident(item.parent)) in idents:
            continue
        out.append(item)
    return out


def removals(resources: Resources, before: Inventory, after: Inventory) -> list[Removal]:
    """The requests removing what is in ``after`` and not in ``before``, kinds in spec order;
    nothing for a kind no command removes, nor for what goes with a new parent."""
    appeared = _top_level(resources, after.new_since(before))
    out = []
    for kind in resources.kinds.values():
        if kind.remove_cmd is None or kind.remove_key is None:
            continue
        for item in appeared:
            if item.kind == kind.name:
                out.append(Removal(item, {"cmd": kind.remove_cmd, kind.remove_key: item.key}))
    return out


@dataclass(frozen=True)
class Left:
    """Something still on the server after the removals, and why."""

    item: Item
    reason: str

    def text(self) -> str:
        return f"{self.item.text()}: {self.reason}"


@dataclass(frozen=True)
class Residue:
    """What a run left: ``appeared`` (on the server after the run, not before it; what is
    held in a new queue is counted with the queue), ``removed`` (of those, gone after the
    removals), ``left`` (still there, or not known to be gone, each with the reason) and
    ``unlisted`` (what an inventory could not list, so nothing is known of it)."""

    appeared: tuple[Item, ...] = ()
    removed: tuple[Item, ...] = ()
    left: tuple[Left, ...] = ()
    unlisted: Mapping[str, str] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        """Nothing appeared that is still there, and everything could be listed."""
        return not self.left and not self.unlisted


def settle(resources: Resources, before: Inventory, after: Inventory,
           outcomes: Mapping[tuple[Any, ...], Any], final: Inventory) -> Residue:
    """The :class:`Residue` of a run: ``before`` the run, ``after`` it, ``outcomes`` (an
    item's ``ident`` -> the reply to its removal) and ``final``, taken after the removals."""
    appeared = _top_level(resources, after.new_since(before))
    made = {i.ident for i in after.new_since(before)}
    still = {i.ident: i for i in final.new_since(before)}
    left: list[Left] = []
    for item in _top_level(resources, still.values()):
        left.append(Left(item, _why_left(resources, item, outcomes, made)))
    removed = []
    for item in appeared:
        kind = resources.kinds[item.kind]
        if item.ident in still:
            continue
        if not final.listed(kind, item.parent):
            left.append(Left(item, f"not known to be gone: {final.unlisted[_where(kind, item.parent)]}"))
        else:
            removed.append(item)
    unlisted = {**before.unlisted, **after.unlisted, **final.unlisted}
    return Residue(tuple(appeared), tuple(removed), tuple(left), unlisted)


def _why_left(resources: Resources, item: Item, outcomes: Mapping[tuple[Any, ...], Any],
              made: set[tuple[Any, ...]]) -> str:
    kind = resources.kinds[item.kind]
    if item.ident not in made:
        return "appeared after the run's last command (while removing)"
    if item.ident in outcomes:
        err = reply_error(outcomes[item.ident])
        if err is not None:
            return f"{kind.remove_cmd} answered {err}"
        return f"{kind.remove_cmd} answered ok, yet it is still listed"
    if kind.within is not None:
        return (f"held in {kind.within} {brief(item.parent)}, which was there before the run; "
                f"no command removes one {kind.name} item alone")
    return f"no command of the profile removes one {kind.name} item"


# -- health -----------------------------------------------------------------------------------
def probe_requests(resources: Resources) -> list[tuple[str, Request]]:
    """(probe name, request): the server-wide list commands, then the spec's probes."""
    names = list(dict.fromkeys([k.list_cmd for k in resources.top()] + list(resources.probes)))
    return [(n, {"cmd": n}) for n in names]


def probe_results(names: Sequence[str], replies: Sequence[Any]) -> dict[str, str | None]:
    """Probe name -> None when it answered ok, else what it answered."""
    return {n: reply_error(r) for n, r in zip(names, replies)}


@dataclass
class Break:
    """A probe that answered ok and then failed: ``error`` is what it answers now, ``units``
    the cases (or examples) running since its last ok answer. ``recovered``: it answered ok
    again later (``recovered_after`` says after what)."""

    probe: str
    error: str
    units: tuple[str, ...]
    recovered: bool = False
    recovered_after: str = ""

    def text(self, unit: str = "case") -> str:
        shown = list(self.units[:SHOWN_UNITS])
        more = len(self.units) - len(shown)
        who = ", ".join(shown) + (f" and {more} more" if more > 0 else "")
        plural = "s" if len(self.units) != 1 else ""
        head = f"server broken after {unit}{plural} {who}" if who else "server broken"
        tail = f" (answers ok again {self.recovered_after})" if self.recovered else ""
        return f"{head}: {self.probe} now answers {self.error}{tail}"

    def jsonable(self) -> dict[str, Any]:
        return {"probe": self.probe, "error": self.error, "units": list(self.units),
                "recovered": self.recovered, "recovered_after": self.recovered_after,
                "text": self.text()}


class HealthWatch:
    """Each probe's state over a run, and the breaks (see the module docstring). Times are
    the caller's clock (any monotonic number). ``failing_before``: the probes that failed at
    the start, which are not watched."""

    def __init__(self) -> None:
        self.failing_before: dict[str, str] = {}
        self.breaks: list[Break] = []
        self._last_ok: dict[str, float] = {}   # probe -> when its last ok round began
        self._broken: dict[str, Break] = {}
        self._running: dict[str, float] = {}
        self._ended: list[tuple[str, float, float]] = []
    def baseline(self, results: Mapping[str, str | None], began: float) -> None:
        for name, err in results.items():
            if err is None:
                self._last_ok[name] = began
            else:
                self.failing_before[name] = err

    def started(self, unit: str, at: float) -> None:
        self._running[unit] = at

    def finished(self, unit: str, at: float) -> None:
        start = self._running.pop(unit, at)
        self._ended.append((unit, start, at))

    def suspects(self, since: float, until: float) -> tuple[str, ...]:
        """The units running at some time between ``since`` and ``until``, in start order."""
        spans = [(s, u) for u, s, e in self._ended if s < until and e > since]
        spans += [(s, u) for u, s in self._running.items() if s < until]
        return tuple(u for _, u in sorted(spans))

    def observe(self, results: Mapping[str, str | None], began: float, ended: float,
                after: str = "") -> list[Break]:
        """One probe round (sent at ``began``, answered by ``ended``): the new breaks.
        ``after`` says what preceded the round, for a recovery (``"after the removals"``)."""
        new = []
        for name, err in results.items():
            if name in self.failing_before or name not in self._last_ok:
                continue
            broken = self._broken.get(name)
            if err is None:
                self._last_ok[name] = began
                if broken is not None:
                    broken.recovered, broken.recovered_after = True, after
                    del self._broken[name]
            elif broken is None:
                brk = Break(name, err, self.suspects(self._last_ok[name], ended))
                self._broken[name] = brk
                self.breaks.append(brk)
                new.append(brk)
        # what ended before every probe's last ok round can no longer be a suspect
        horizon = min(self._last_ok.values(), default=0.0)
        self._ended = [span for span in self._ended if span[2] > horizon]
        return new

    @property
    def watched(self) -> tuple[str, ...]:
        """The probes that answered ok at the start (only they can break)."""
        return tuple(self._last_ok)

    @property
    def broken(self) -> tuple[str, ...]:
        """The probes failing now that answered ok before."""
        return tuple(self._broken)
