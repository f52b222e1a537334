"""The loose ends of file-by-file decoding: requests one file left waiting (``opens``) and
answers a later file could not pair (``orphans``), matched and settled.

:func:`match` is the rule both engines follow (the Spark engine as joins, the local engine
in Python, here). An identifier key (a reqId, a task id) pairs an open and an orphan of one
connection with that key when the orphan's file is the nearest later file holding that key's
orphan and the open's file the nearest earlier one holding that key's open (a join on
(run, conn_id, key) and two window ranks). A FIFO key (``n:``, ``q:``, ``h:``: a rank within
its file) pairs in order: the n-th waiting request of its class on the connection (ordered by
file, then rank) with the n-th answer of that class no file could pair (a join on the global
rank a window gives each), when the answer's file is the later one. :func:`settle` turns the outcome into
rows: a pair (``split`` true, latency across the files) and the reply's findings for each
match (:func:`judge_split`), the finding the tap would have made for each orphan left
(:func:`loose_finding`), and one INFO finding per connection with requests left unanswered.
Match keys are those of ``traffic.bunqueue.match_key`` and ``traffic.quicx`` (``s:``/``r:``
a reqId, ``n:``/``q:``/``h:`` a FIFO rank within the file, ``t:``/``r:`` a task id). One
approximation remains for FIFO classes: a file's judge does not know the requests an earlier
file left waiting, so an answer in a later file pairs first with a request of its own file
sent before it; counts stay exact, that answer's latency may be attributed to the wrong one
of the two requests.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from ..judge import Verdict
from ..judge.exchange import Pending, judge_reply
from ..spec import Profile
from ..traffic.analyzer import DEFAULT_MAX_FRAME, PROTOCOLS

Row = dict[str, Any]


#: Match-key classes that are a FIFO rank within their file (``n:3``), not an identifier.
FIFO_CLASSES = frozenset({"n", "q", "h"})


def fifo_rank(key: str) -> tuple[str, int] | None:
    """(class, rank) of a FIFO key, None for an identifier key."""
    cls, _, rank = key.partition(":")
    if cls in FIFO_CLASSES and rank.isdigit():
        return cls, int(rank)
    return None


def match(opens: list[Row], orphans: list[Row]) -> tuple[list[tuple[Row, Row]], list[Row],
                                                          list[Row]]:
    """(matched (open, orphan) pairs, opens left, orphans left); rows need run, conn_id, seq
    and key. Identifier keys pair the nearest files on both sides; FIFO keys pair in order:
    the n-th waiting request of a connection's class (by file, then rank) with its n-th
    unpaired answer, when the answer's file is the later one."""
    matched: list[tuple[Row, Row]] = []
    fifo_o: dict[tuple, list[Row]] = defaultdict(list)
    fifo_r: dict[tuple, list[Row]] = defaultdict(list)
    by_key: dict[tuple, list[Row]] = defaultdict(list)
    for o in opens:
        f = fifo_rank(o["key"])
        if f is not None:
            fifo_o[(o["run"], o["conn_id"], f[0])].append(o)
        else:
            by_key[(o["run"], o["conn_id"], o["key"])].append(o)
    candidates: list[tuple[Row, Row]] = []
    for r in orphans:
        f = fifo_rank(r["key"])
        if f is not None:
            fifo_r[(r["run"], r["conn_id"], f[0])].append(r)
            continue
        for o in by_key.get((r["run"], r["conn_id"], r["key"]), ()):
            if r["seq"] > o["seq"]:
                candidates.append((o, r))
    for group, waiting in fifo_o.items():
        answers = sorted(fifo_r.get(group, ()), key=lambda x: (x["seq"], fifo_rank(x["key"])))
        waiting.sort(key=lambda x: (x["seq"], fifo_rank(x["key"])))
        matched += [(o, r) for o, r in zip(waiting, answers) if r["seq"] > o["seq"]]
    # identifiers, nearest on both sides: for each orphan the latest earlier open, for each
    # open the earliest later orphan (as the Spark engine's two window ranks)
    best_open: dict[int, int] = {}
    best_orphan: dict[int, int] = {}
    for o, r in candidates:
        if best_open.get(id(r), -1) < o["seq"]:
            best_open[id(r)] = o["seq"]
        if id(o) not in best_orphan or r["seq"] < best_orphan[id(o)]:
            best_orphan[id(o)] = r["seq"]
    matched += [(o, r) for o, r in candidates
                if best_open[id(r)] == o["seq"] and best_orphan[id(o)] == r["seq"]]
    used_o = {id(o) for o, _ in matched}
    used_r = {id(r) for _, r in matched}
    return (matched, [o for o in opens if id(o) not in used_o],
            [r for r in orphans if id(r) not in used_r])


def settle(protocol: str, profile: Profile, matched: list[tuple[Row, Row]],
           opens_left: list[Row], orphans_left: list[Row]) -> tuple[list[Row], list[Row]]:
    """(pair rows, violation rows) for the outcome of :func:`match`."""
    pairs: list[Row] = []
    violations: list[Row] = []
    for o, r in matched:
        pairs.append({"table": "pairs", "run": o["run"], "conn_id": o["conn_id"],
                      "seq": r["seq"], "command": o["command"], "key": o["key"],
                      "sent_ns": o["t_ns"], "answered_ns": r["t_ns"], "t_ns": r["t_ns"],
                      "ok": r["ok"], "answer": r["answer"], "split": True})
        for v in judge_split(protocol, profile, o["command"], r["payload"]):
            violations.append({"table": "violations", "run": r["run"], "conn_id": r["conn_id"],
                               "seq": r["seq"], "t_ns": r["t_ns"], "direction": "s2c", **v})
    for r in orphans_left:
        violations.append({"table": "violations", "run": r["run"], "conn_id": r["conn_id"],
                           "seq": r["seq"], "t_ns": r["t_ns"], "direction": "s2c",
                           **loose_finding(protocol, r["key"], r["answer"])})
    left: dict[tuple, list[Row]] = defaultdict(list)
    for o in opens_left:
        left[(o["run"], o["conn_id"])].append(o)
    for (run, conn_id), rows in sorted(left.items()):
        names = ", ".join(sorted({o["command"] for o in rows}))
        last = max(rows, key=lambda o: (o["seq"], o["t_ns"]))
        violations.append({"table": "violations", "run": run, "conn_id": conn_id,
                           "seq": last["seq"], "t_ns": last["t_ns"], "direction": "none",
                           "level": Verdict.INFO, "requirement": None, "kind": "unanswered",
                           "command": None,
                           "message": f"{len(rows)} request(s) unanswered when the "
                                      f"connection's recording ended ({names})"})
    return pairs, violations


def judge_split(protocol: str, profile: Profile, command: str, payload: bytes) -> list[dict]:
    """Findings on an answer joined to its request across files: for bunqueue the reply
    judged as the answer to its command (the registry's reply checks,
    :func:`queuewire.judge.exchange.judge_reply`, as the tap judges it); quicx answers were
    judged whole when decoded."""
    if protocol != "bunqueue":
        return []
    proto = _split_proto(protocol, profile)
    stream = proto.stream("s2c")
    items = stream.feed(payload)
    if not items or items[0].message is None or not isinstance(items[0].message, dict):
        return []
    msg = items[0].message
    pending = Pending(command, 0, reqid_is_str=type(msg.get("reqId", "")) is str)
    return [{"level": f.level, "requirement": f.requirement, "kind": f.kind, "command": command,
             "message": f.message} for f in judge_reply(proto.judgement, pending, msg)]


_SPLIT: dict[str, Any] = {}


def _split_proto(protocol: str, profile: Profile) -> Any:
    p = _SPLIT.get(profile.name)
    if p is None:
        p = _SPLIT[profile.name] = PROTOCOLS[protocol](profile, DEFAULT_MAX_FRAME)
    return p


#: What the tap reports for an answer it could not pair, by the kind of its match key
#: (see ``traffic.bunqueue`` and ``traffic.quicx``): (requirement, kind, message).
_LOOSE_ANSWERS = {
    "s": ("BQ-ENV-2", "reqid_unknown", "a reply with reqId {key}, which no request in flight "
          "carries"),
    "r": ("BQ-ENV-2", "reqid_unknown", "a reply with reqId {key}, which no request in flight "
          "carries"),
    "n": (None, "reply_unpaired", "a frame without reqId that answers no request seen without "
          "one"),
}
_LOOSE_QUICX = {
    "q": (None, "answer_unpaired", "{answer} while no request was pending"),
    "h": (None, "pong_unpaired", "MSG_PONG without a MSG_HEARTBEAT pending"),
    "t": ("QX-DONE-3", "task_unknown", "{answer} for task {key}, which the daemon did not give "
          "this connection (or it was already answered)"),
    "r": (None, "result_unpaired", "{answer} for task {key}, not accepted on this connection"),
}


def loose_finding(protocol: str, key: str, answer: str) -> dict:
    """The finding for an answer no file of its connection has a request for: the one the
    tap makes when it sees the same thing in one piece."""
    tag, _, rest = key.partition(":")
    table = _LOOSE_ANSWERS if protocol == "bunqueue" else _LOOSE_QUICX
    requirement, kind, text = table.get(tag, (None, "answer_unpaired", "{answer} unpaired"))
    # as the tap: an answer that pairs with nothing cites a reading (NON-STRICT) or nothing (INFO)
    level = Verdict.NON_STRICT if requirement else Verdict.INFO
    return {"level": level, "requirement": requirement, "kind": kind, "command": None,
            "message": text.format(key=rest, answer=answer)}
