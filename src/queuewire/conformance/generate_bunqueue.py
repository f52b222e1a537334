"""Generated bunqueue conformance cases: one shape case per command, one limit case per use.

Both generators read everything they send from the profile: a command's minimal valid request
is :func:`queuewire.spec.instances.minimal` of its request schema, its fields that name a job
are found by their ``$ref`` (``JobId``, ``QueueName``, ``LockToken``), and the limit probes are
the ones :mod:`queuewire.vectors.bunqueue` makes (``probe_values`` at limit-1, limit and limit+1 for
each schema keyword a limit substituted, ``Limit.uses`` saying where). What the spec cannot
say is *which state* a command needs its job in (ACK needs an active job, Promote a delayed
one): that is the small :data:`JOB_STATE` table below (with ``NAMED`` and ``LISTS``), whose
recipes are written in the case language (``cases/README.md``) with the spec's field names
looked up where the recipe sends an option. Each generated case isolates itself in ``${queue}``
(every field typed ``QueueName`` or ``QueueRef`` names it) and its ``cleanup`` (run
whatever the steps did, never judged) removes the worker, webhook or schedule it made (also
one an invalid probe made on a server that accepted it) and obliterates every queue it named,
so it can run against a shared server.

* :func:`command_shapes`: every command but Auth (its cases need a token, see
  ``bunqueue_logic``) is sent once with a minimal valid request after the setup its job needs;
  the expectation is ``ok`` and the interpreter validates the reply against the command's
  response schema (violations under ``BQ-CMD-<cmd>``, missing and extra fields separately).
* :func:`limit_cases`: every (limit, command, field) the spec's ``Limit.uses`` reach gets one
  case whose steps probe each bound: a valid value must be answered ok, an invalid one with an
  error reply (any error: the documents give no string) citing the limit's requirement. A
  valid value between two readings of the limit's unit (job data over 10,000,000 bytes, "10
  MB" in decimal megabytes, up to 10 MiB) cites instead the requirement whose
  ``reading-band`` covers it (:func:`reading_band`), a SHOULD: only a value beyond both
  readings is judged by the limit's own MUST.
"""

from __future__ import annotations

import copy
import itertools
import json
import uuid
from collections.abc import Iterable, Mapping
from typing import Any

from ..spec import Profile, load_profile
from ..spec.instances import minimal
from ..vectors.bunqueue import def_uses, from_json, probe_values, set_path
from .model import Case

PROTOCOL = "bunqueue"
JOB_DEF, QUEUE_DEF, TOKEN_DEF = "JobId", "QueueName", "LockToken"
# every definition a queue name is sent as: QueueName (commands that add jobs) and QueueRef
# (commands that only look a queue up); a case points both at its own ${queue}
QUEUE_DEFS = (QUEUE_DEF, "QueueRef")
DEF_PREFIX = "#/$defs/"

# -- setup recipes (behaviour, not spec facts) ---------------------------------------------------
# The state a command's job must be in for a minimal request to succeed, by command. Commands
# not listed that name a job use a waiting job; commands that name only a queue get a waiting
# job in it so that their replies carry data to validate.
JOB_STATE = {
    "ACK": "active", "ACKB": "active", "FAIL": "active", "Progress": "active",
    "GetProgress": "active", "MoveToDelayed": "active", "JobHeartbeat": "active",
    "JobHeartbeatB": "active", "Promote": "delayed", "WaitJob": "completed",
    "GetResult": "completed", "RetryCompleted": "completed", "Dlq": "failed",
    "RetryDlq": "failed", "PurgeDlq": "failed",
}
# Request fields that name a worker, webhook, schedule or custom id rather than a job: the
# setup that makes one, and the variable it saves.
NAMED = {
    "Heartbeat": ("worker", "id"), "UnregisterWorker": ("worker", "workerId"),
    "RemoveWebhook": ("webhook", "webhookId"), "CronGet": ("cron", "name"),
    "CronDelete": ("cron", "name"), "GetJobByCustomId": ("custom", "customId"),
}
# Commands that list server-wide things: their shape case makes one first (a queue with a
# waiting job, a schedule, a webhook, a worker), so the reply has an entry to validate however
# clean the server is and whatever other cases ran before.
LISTS = {"ListQueues": "queue", "CronList": "cron", "ListWebhooks": "webhook",
         "ListWorkers": "worker"}
# Categories (spec/bunqueue commands) whose objects are server-wide, not per queue: a case
# using one of their commands is exclusive (runs alone under --jobs), as is one whose command
# takes no argument at all (Stats, Metrics, ListQueues, CronList: it reads the whole server).
SERVER_WIDE = ("workers", "webhooks")
SKIP_SHAPE = ("Auth",)  # needs a token: bunqueue_logic.auth_* cases
DELAY_MS = 60_000  # a delayed job stays delayed for the whole case
# A schedule that does not fire during the case, nor (should a failed case leave it behind on
# a shared server) for most of a year: once, at midnight on January 1st.
YEARLY = "0 0 1 1 *"


def _var(name: str) -> str:
    """The case-language reference to variable ``name``."""
    return "${" + name + "}"


def _profile(profile: Profile | str) -> Profile:
    return load_profile(profile) if isinstance(profile, str) else profile


def _field_with_def(cmd: Any, definition: str) -> str:
    """The request field of ``cmd`` whose schema is ``$ref`` to ``definition``."""
    for name, sub in cmd.request["properties"].items():
        if isinstance(sub, Mapping) and sub.get("$ref") == DEF_PREFIX + definition:
            return name
    raise KeyError(f"{cmd.name} has no field of type {definition}")


def _ok(save: Mapping | None = None, send: Mapping | None = None) -> dict:
    step: dict[str, Any] = {"send": dict(send or {}), "expect": {"ok": {}}}
    if save:
        step["save"] = dict(save)
    return step


def job_setup(profile: Profile, state: str, var: str = "job", **options: Any) -> list[dict]:
    """Steps that leave one job of ``${queue}`` in ``state`` with its id in ``${var}``."""
    model = profile.model
    push = model.command("PUSH")
    request = minimal(dict(push.request))
    request[_field_with_def(push, QUEUE_DEF)] = "${queue}"
    if state == "delayed":
        request[_field_with_def(push, "Delay")] = DELAY_MS
    if state == "failed":
        request[_field_with_def(push, "MaxAttempts")] = profile.limit("max_attempts").min
    request.update(options)
    steps = [_ok({var: _reply_id_field(push)}, request)]
    if state in ("active", "completed", "failed"):
        pull = model.command("PULL")
        req = minimal(dict(pull.request))
        req[_field_with_def(pull, QUEUE_DEF)] = "${queue}"
        steps.append(_ok(None, req))
    if state in ("completed", "failed"):
        name = "ACK" if state == "completed" else "FAIL"
        cmd = model.command(name)
        req = minimal(dict(cmd.request))
        req[_field_with_def(cmd, JOB_DEF)] = _var(var)
        steps.append(_ok(None, req))
    return steps


def _reply_id_field(cmd: Any) -> str:
    """The single required field of a reply beyond the envelope (PUSH answers ``id``)."""
    own = [f for f in cmd.response.get("required", ()) if f not in ("ok", "reqId")]
    if len(own) != 1:
        raise KeyError(f"{cmd.name}'s reply has no single own required field: {own}")
    return own[0]


def _named_setup(profile: Profile, kind: str) -> tuple[list[dict], list[dict]]:
    """(setup, cleanup) steps making a worker, webhook, schedule or custom-id job."""
    model = profile.model
    if kind == "worker":
        reg = model.command("RegisterWorker")
        req = minimal(dict(reg.request))
        _set_queues(reg, req)
        unreg = model.command("UnregisterWorker")
        field = NAMED["UnregisterWorker"][1]
        return ([_ok({"worker": f"data.{field}"}, req)],
                [_forget({"cmd": unreg.name, field: "${worker}"})])
    if kind == "webhook":
        add = model.command("AddWebhook")
        req = minimal(dict(add.request))
        field = NAMED["RemoveWebhook"][1]
        return ([_ok({"webhook": f"data.{field}"}, req)],
                [_forget({"cmd": "RemoveWebhook", field: "${webhook}"})])
    if kind == "cron":
        cron = model.command("Cron")
        req = minimal(dict(cron.request))
        req[_field_with_def(cron, QUEUE_DEF)] = "${queue}"
        _schedule(req)
        return ([_ok({"cron": "cron.name"}, req)],
                [_forget({"cmd": "CronDelete", "name": "${queue}"})])
    if kind == "custom":
        return job_setup(profile, "waiting", jobId="${queue}-custom") + \
            [{"send": {"cmd": "GetJob", "id": "${job}"}, "expect": {"ok": {}},
              "save": {"custom": "job.customId"}}], []
    raise KeyError(kind)


def _queue_fields(cmd: Any) -> set[tuple]:
    """The request paths of ``cmd`` that carry a queue name (QUEUE_DEFS)."""
    schema = dict(cmd.request)
    return {path for d in QUEUE_DEFS for path in def_uses(schema, d)}


def _set_queues(cmd: Any, request: dict) -> None:
    """Point every queue name field (and list of them) of ``request`` at ``${queue}``, so that
    a case never touches a queue it did not make (a server's own ``emails``)."""
    for path in sorted(_queue_fields(cmd)):
        if len(path) == 1 and path[0] in request:
            request[path[0]] = "${queue}"
        elif len(path) == 2 and path[1] == "*" and path[0] in request:
            request[path[0]] = ["${queue}"]


def _set_jobs(cmd: Any, request: dict, var: str = "job") -> bool:
    """Point the JobId fields of ``request`` at ``${var}``; whether there was one."""
    schema = dict(cmd.request)
    found = False
    for path in def_uses(schema, JOB_DEF):
        if len(path) == 1 and path[0] in request:
            request[path[0]] = _var(var)
            found = True
        elif len(path) == 2 and path[1] == "*" and path[0] in request:
            request[path[0]] = [_var(var)]
            found = True
    return found


def _forget(request: dict) -> dict:
    """A cleanup step: sent, its reply not waited for and not judged."""
    return {"send": request, "wait": False}


def _cleanup() -> list[dict]:
    """The last cleanup step of every generated case (cleanup is never judged)."""
    return [{"send": {"cmd": "Obliterate", "queue": "${queue}"}}]



def server_wide(cmd: Any) -> bool:
    """Whether a case sending ``cmd`` reads or changes server-wide state (see SERVER_WIDE)."""
    return cmd.category in SERVER_WIDE or cmd.name in LISTS or \
        (cmd.name in NAMED and NAMED[cmd.name][0] in ("worker", "webhook")) or \
        not set(cmd.request_fields) - {"cmd", "reqId"}


def command_shapes(profile: Profile | str) -> list[Case]:
    """One case per command: a minimal valid request, answered ok with the documented shape."""
    profile = _profile(profile)
    out = []
    null_rule = profile.model.protocol_errors["null_optional"].requirement  # BQ-ENV-7
    for cmd in profile.model.commands.values():
        if cmd.name in SKIP_SHAPE:
            continue
        request = minimal(dict(cmd.request))
        setup: list[dict] = []
        cleanup: list[dict] = []
        _set_queues(cmd, request)
        if cmd.name in NAMED:
            kind, field = NAMED[cmd.name]
            setup, cleanup = _named_setup(profile, kind)
            request[field] = _var(kind)
            if kind == "cron" and cmd.name == "CronDelete":
                cleanup = []
        elif cmd.name in LISTS:
            if LISTS[cmd.name] == "queue":
                setup = job_setup(profile, "waiting")
            else:
                setup, cleanup = _named_setup(profile, LISTS[cmd.name])
        else:
            names_job = _set_jobs(cmd, request)
            uses_queue = bool(list(def_uses(dict(cmd.request), QUEUE_DEF)))
            if names_job or uses_queue or cmd.name in JOB_STATE:
                setup = job_setup(profile, JOB_STATE.get(cmd.name, "waiting"))
        if cmd.name == "Cron":
            _schedule(request)
            cleanup = [_forget({"cmd": "CronDelete", "name": "${queue}"})]
        if cmd.name == "UnregisterWorker":
            cleanup = []
        if cmd.name == "RemoveWebhook":
            cleanup = []
        if cmd.name == "RegisterWorker":
            cleanup = [_forget({"cmd": "UnregisterWorker", "workerId": "${worker}"})]
            step = _ok({"worker": "data.workerId"}, request)
        elif cmd.name == "AddWebhook":
            cleanup = [_forget({"cmd": "RemoveWebhook", "webhookId": "${webhook}"})]
            step = _ok({"webhook": "data.webhookId"}, request)
        else:
            step = _ok(None, request)
        steps = setup + [step]
        out.append(Case(
            id=f"bunqueue.shape.{cmd.name}",
            title=f"{cmd.name} with a minimal valid request is answered ok with the documented "
                  f"reply shape",
            protocol=PROTOCOL, requirements=(cmd.requirement, "BQ-ENV-3", "BQ-ENV-6",
                                             null_rule),
            steps=tuple(steps), command=cmd.name, tags=("shape", "generated"),
            source="generate_bunqueue:command_shapes", cleanup=tuple(cleanup + _cleanup()),
            exclusive=server_wide(cmd)))
    return out


# -- limits -----------------------------------------------------------------------------------
def reading_band(profile: Profile, limit: str, size: float) -> str | None:
    """The requirement whose ``reading-band`` (``{limit, above}``, spec/README.md) covers
    ``size`` of ``limit``: a size over ``above`` (the limit's unit in its other reading, 64 MB
    as 64,000,000 bytes) and at most the limit (67,108,864) is accepted under one reading only,
    so accepting it is that requirement's (an implied SHOULD). None when no band covers it
    (under both readings, or over the limit: beyond both)."""
    lim = profile.limits.get(limit)
    top = None if lim is None else lim.max if lim.max is not None else lim.value
    if not isinstance(top, (int, float)) or size > top:
        return None
    for rid, req in (profile.tree.get("requirements") or {}).items():
        band = req.get("reading-band") if isinstance(req, Mapping) else None
        if isinstance(band, Mapping) and band.get("limit") == limit and size > band["above"]:
            return str(rid)
    return None


def _probe_size(keyword: str, probe: Any) -> float | None:
    """What a probe of ``keyword`` measures against its bound (the number, the string's length,
    the JSON bytes of ``{"$repeat": [text, n]}``), or None (a pattern)."""
    if keyword in ("minimum", "maximum") and isinstance(probe, (int, float)):
        return probe
    if keyword in ("minLength", "maxLength") and isinstance(probe, str):
        return len(probe)
    if keyword == "x-maxJsonBytes":
        if isinstance(probe, Mapping) and "$repeat" in probe:
            text, n = probe["$repeat"]  # a JSON string: the text n times between two quotes
            return len(str(text).encode()) * int(n) + 2
        return len(json.dumps(probe, ensure_ascii=False, separators=(",", ":")).encode())
    return None


def _uses(profile: Profile, limit: Any) -> Iterable[tuple[Any, tuple, str, Any, Mapping]]:
    """(command, field path, keyword, bound, schema node) for every request use of ``limit``."""
    model = profile.model
    for _key, path in limit.uses:
        keyword = path[-1]
        if path[0] == "definitions":
            node = profile.tree["definitions"][path[1]]
            for cmd in model.commands.values():
                for field in def_uses(dict(cmd.request), path[1]):
                    yield cmd, field, keyword, node[keyword], node
        elif path[0] == "commands" and path[2] == "request":
            cmd = model.commands[path[1]]
            node = profile.tree
            for part in path[:-1]:
                node = node[part]
            field = tuple(p for p in path[3:-1] if p not in ("properties", "items"))
            yield cmd, field, keyword, node[keyword], node


def _unique_string(value: str, tag: str) -> str:
    """A fresh string of ``value``'s length and character class (queue names are shared)."""
    if not value:
        return value
    stem = tag + uuid.uuid4().hex
    if not value.isalnum():
        return stem[:10] + value
    if len(value) >= len(stem):
        return stem + value[len(stem):]
    return stem[: len(value)]


def limit_cases(profile: Profile | str) -> list[Case]:
    """One case per (limit, command, field): each bound probed at limit-1, limit, limit+1."""
    profile = _profile(profile)
    grouped: dict[tuple[str, str, tuple], list] = {}
    for limit in profile.limits.values():
        for cmd, field, keyword, bound, node in _uses(profile, limit):
            if cmd.name in SKIP_SHAPE:
                continue
            grouped.setdefault((limit.name, cmd.name, field), []).append((keyword, bound, node))
    out = []
    for (lname, cname, field), probes in grouped.items():
        limit = profile.limit(lname)
        cmd = profile.model.command(cname)
        queue_field = _is_queue_field(cmd, field)
        named = NAMED.get(cname)
        rids: list[str] = []
        cleanup: list[dict] = []
        steps: list[dict] = []
        # a PULL probe takes a job: each one gets a fresh job, so that none long-polls
        fresh_job = cname in ("PULL", "PULLB") and not queue_field
        if named:
            steps, cleanup = _named_setup(profile, named[0])
        elif not fresh_job and _set_jobs(cmd, {k: None for k in cmd.request["properties"]}):
            steps = job_setup(profile, JOB_STATE.get(cname, "waiting"))
        if cname == "Cron":
            cleanup = [_forget({"cmd": "CronDelete", "name": "${queue}"})]
        n = 0
        for keyword, bound, node in probes:
            rid = (node.get("x-keywordRequirements") or {}).get(keyword) or limit.requirement
            assert rid is not None, f"limit {limit.name} names no requirement"
            rids.append(rid)
            for _label, probe, valid in probe_values(keyword, bound):
                n += 1
                size = _probe_size(keyword, probe) if valid else None
                # a valid value between two readings of the unit is judged by the band's SHOULD
                step_rid = (reading_band(profile, limit.name, size) if size is not None
                            else None) or rid
                rids.append(step_rid)
                # {"$repeat": [text, n]} stays symbolic here (see EXPANDED)
                value = probe if isinstance(probe, dict) else from_json(probe)
                request = _base_request(profile, cmd, named)
                if valid and queue_field and isinstance(value, str):
                    value = _unique_string(value, "qw")
                set_path(dict(cmd.request), request, field, value)
                if fresh_job:
                    steps += job_setup(profile, "waiting", var=f"j{n}")
                step: dict[str, Any] = {"send": request}
                if valid:
                    step["expect"] = {"ok": {}, "requirement": step_rid}
                else:
                    step["expect"] = {"error": True, "requirement": step_rid}
                undo = UNDO.get(cname)
                if undo is not None and valid:
                    step["save"] = {f"u{n}": undo[1]}
                elif undo is not None:
                    # a server that accepts the invalid value made the thing all the same: its
                    # id is kept when the reply has one (a "?" path) and the cleanup removes it
                    step["save"] = {f"u{n}": undo[1] + "?"}
                    cleanup.append({"send": {"cmd": undo[0], undo[2]: f"${{u{n}}}"}})
                steps.append(step)
                if undo is not None and valid:
                    steps.append(_forget({"cmd": undo[0], undo[2]: f"${{u{n}}}"}))
                if queue_field and isinstance(value, str):
                    # the probe made a queue of that name: removed by the cleanup
                    cleanup.append({"send": {"cmd": "Obliterate", "queue": value}})
                elif valid and cname == "MoveToDelayed":
                    # the job is delayed (or, after delay 0, waiting again): make it active
                    # again for the next probe
                    steps += [{"send": {"cmd": "Promote", "id": "${job}"},
                               "expect": {"any_of": [{"ok": {}}, {"error": True}]}},
                              _ok(None, _pull(profile))]
        pointer = "/".join(str(p) for p in field)
        all_steps = steps
        big = any(_has_repeat(s) for s in all_steps)
        out.append(Case(
            id=f"bunqueue.limit.{lname}.{cname}.{pointer.replace('/', '.').replace('*', 'item')}",
            title=f"{cname} /{pointer}: {limit.doc.rstrip('.')}, probed at each bound",
            protocol=PROTOCOL,
            requirements=tuple(dict.fromkeys(rids + ["BQ-ENV-4"])),
            # values of megabytes stay symbolic ($repeat) in the case and are built when it
            # runs (bunqueue_logic.expanded_steps), so a Case stays small to hold and print
            steps=() if big else tuple(all_steps),
            logic=EXPANDED if big else None, params={"steps": all_steps} if big else None,
            command=cname, tags=("limit", "generated"), source="generate_bunqueue:limit_cases",
            cleanup=tuple(cleanup + _cleanup()),
            exclusive=server_wide(profile.model.commands[cname])))
    return out


EXPANDED = "queuewire.conformance.bunqueue_logic:expanded_steps"


def _has_repeat(node: Any) -> bool:
    if isinstance(node, dict):
        return "$repeat" in node or any(_has_repeat(v) for v in node.values())
    if isinstance(node, list):
        return any(_has_repeat(v) for v in node)
    return False


# A valid probe of these commands creates something the case must remove again:
# command -> (undo command, reply path of the new id, undo field)
UNDO = {
    "RegisterWorker": ("UnregisterWorker", "data.workerId", "workerId"),
    "AddWebhook": ("RemoveWebhook", "data.webhookId", "webhookId"),
}


def _pull(profile: Profile) -> dict:
    pull = profile.model.command("PULL")
    req = minimal(dict(pull.request))
    req[_field_with_def(pull, QUEUE_DEF)] = "${queue}"
    return req


def _is_queue_field(cmd: Any, field: tuple) -> bool:
    return field in _queue_fields(cmd)


def _base_request(profile: Profile, cmd: Any, named: tuple | None) -> dict:
    request = copy.deepcopy(minimal(dict(cmd.request)))
    _set_queues(cmd, request)
    _set_jobs(cmd, request)
    if named:
        request[named[1]] = _var(named[0])
    if cmd.name == "Cron":
        _schedule(request)
    return request


def _schedule(request: dict) -> None:
    """A Cron request made valid beyond its schema: a unique name and a schedule."""
    request["name"] = "${queue}"
    request["schedule"] = YEARLY


def hello_cases(profile: Profile | str) -> list[Case]:
    """Hello answers the profile's protocol version and capabilities; the requirement cited is
    the one the profile's protocol_version limit names (profiles replace it)."""
    profile = _profile(profile)
    rid = profile.limit("protocol_version").requirement
    assert rid is not None, "limit protocol_version names no requirement"
    hello = profile.model.command("Hello")
    return [Case(
        id="bunqueue.hello.version",
        title="Hello answers the profile's protocol version, capabilities, server and version",
        protocol=PROTOCOL, requirements=(rid, hello.requirement),
        logic="queuewire.conformance.bunqueue_logic:hello_version", command=hello.name,
        tags=("hello", "generated"), source="generate_bunqueue:hello_cases")]


def all_cases(profile: Profile | str) -> list[Case]:
    return list(itertools.chain(command_shapes(profile), limit_cases(profile),
                                hello_cases(profile)))
