"""``fuzz --diff``: how two servers' replies to the same case differ, in classes a user reads.

Sans-IO: :func:`classify` takes the two sides' reply kinds (:meth:`~.runner.Result.kinds`:
per reply its reqId label, its ``ok`` and whether it carries an error; quicx: the message and
its error code) and names the class of the difference with a readable detail. A reqId that is
``null`` on one side, ``undefined`` (MessagePack ext 0) or absent on the other is its own
class: JavaScript servers echo a missing reqId as ``undefined``, and that difference drowns
every other when it is not told apart.
"""

from __future__ import annotations

from typing import Any

#: reqId labels that all say "no reqId" in one way or another
NO_REQID = frozenset({"absent", "null", "undefined"})
NULL_VS_ABSENT = "reqId null, undefined or absent"
COUNT = "number of replies"
OK_VS_ERROR = "ok vs error"
OTHER = "other"


def describe(kind: tuple) -> str:
    """One reply kind as text: ``reqId '1' ok``, ``conn 1 reqId absent error``, ``OK``."""
    if len(kind) == 2:   # quicx: (message, error code)
        name, code = kind
        return f"{name}" + (f" (error code {code})" if code is not None else "")
    conn = ""
    if len(kind) == 4:
        conn, kind = f"conn {kind[0]} ", kind[1:]
    rid, ok, error = kind
    state = "error" if error else "ok" if ok is True else f"ok={ok}"
    return f"{conn}reqId {rid} {state}"


def _blur(kind: tuple) -> tuple:
    """The kind with its "no reqId" labels made one."""
    if len(kind) < 3:
        return kind
    i = len(kind) - 3
    return (*kind[:i], "none" if kind[i] in NO_REQID else kind[i], *kind[i + 1:])


def classify(mine: list[Any], theirs: list[Any]) -> tuple[str, str]:
    """The class of one case's difference, and a readable detail."""
    mine_t, theirs_t = [tuple(k) for k in mine], [tuple(k) for k in theirs]
    only_mine = [k for k in mine_t if k not in theirs_t]
    only_theirs = [k for k in theirs_t if k not in mine_t]
    detail = (f"{'; '.join(map(describe, only_mine)) or '-'} vs "
              f"{'; '.join(map(describe, only_theirs)) or '-'}")
    if sorted(map(_blur, mine_t), key=repr) == sorted(map(_blur, theirs_t), key=repr):
        return NULL_VS_ABSENT, detail
    if len(mine_t) != len(theirs_t):
        return COUNT, f"{len(mine_t)} vs {len(theirs_t)} replies: {detail}"
    rids = {_blur(k)[:-2] for k in only_mine} == {_blur(k)[:-2] for k in only_theirs}
    if only_mine and rids:
        return OK_VS_ERROR, detail
    return OTHER, detail
