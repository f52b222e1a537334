"""What the client takes from a server's answer: the documented types of the fields present.

A client that reads a field of the wrong type passes the server's mistake on to its caller
as somebody else's error (a boolean job id read as ``"False"``, a ``KeyError`` or
``TypeError`` out of the SDK). The session therefore checks every ``ok`` answer to a
caller's command against the profile's reply schema for that command, in a lenient form
built once from the spec: the same schema with every ``required`` list dropped (and
``oneOf`` read as ``anyOf``, since branches told apart only by required fields would
otherwise all match). So a field that is present must have the documented type and range,
at any depth, and a field that is missing is tolerated, because the real bunqueue 2.9.5
leaves out some documented fields (see its published conformance report) and the SDK can do
without most of them; where it cannot (PUSH's ``id``), the SDK's ``need`` (in :mod:`.queue`)
names the rule. Either way the caller meets a :class:`~queuewire.client.bunqueue_session.BunqueueReplyInvalid`
citing the command's requirement id, never a plain Python error.

The check is the compiled ``jsonschema_rs`` ``is_valid`` on the frame as decoded (about 8 µs
for a PULLB of ten jobs); only a frame that fails it, or holds values JSON has no type for
(bytes, extensions, ``undefined``), is walked into the JSON model the documents' types are
read in (``to_json_model``, about 17 µs a job) and judged again, and only then is the error
message computed.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonschema_rs

from ..codecs.validation import to_json_model
from ..spec import Profile


def _lenient(node: Any) -> Any:
    """``node`` without ``required`` lists, ``oneOf`` as ``anyOf``, at every depth."""
    if isinstance(node, Mapping):
        out = {}
        for key, value in node.items():
            if key == "required":
                continue
            out["anyOf" if key == "oneOf" else key] = _lenient(value)
        return out
    if isinstance(node, list | tuple):
        return [_lenient(v) for v in node]
    return node


class ReplyShapes:
    """The lenient reply schemas of one profile, compiled once per session."""

    def __init__(self, profile: Profile):
        commands = profile.model.commands
        self._validators = {name: jsonschema_rs.validator_for(_lenient(copy.deepcopy(
            dict(command.response)))) for name, command in commands.items()}
        self.requirements = {name: command.requirement for name, command in commands.items()}
        # the envelope's rule for ``ok`` (an answer without ``ok: true`` and without an error
        # is neither an answer nor a refusal), as each reply schema cites it
        self._ok_rules = {name: ((command.response.get("properties") or {}).get("ok") or {})
                          .get("x-requirement") for name, command in commands.items()}

    def problem(self, cmd: str, frame: Mapping[str, Any]) -> tuple[str | None, str] | None:
        """(requirement, why) when the ``ok`` answer ``frame`` to ``cmd`` cannot be taken."""
        validator = self._validators.get(cmd)
        if validator is None:
            return None  # a command the profile does not know: nothing to hold it to
        if frame.get("ok") is not True:
            ok = frame.get("ok", "missing")
            return (self._ok_rules.get(cmd) or self.requirements.get(cmd),
                    f"field /ok is {ok!r:.40} in an answer without an error (true expected)")
        try:  # the frame as decoded: plain Python values pass without the JSON model's walk
            if validator.is_valid(frame):
                return None
        except (ValueError, TypeError):  # bytes, ext values, undefined: the model says
            pass
        model = to_json_model(frame)
        try:
            if validator.is_valid(model):
                return None
            err = next(iter(validator.iter_errors(model)), None)
        except ValueError as exc:  # jsonschema-rs: "Recursion limit reached"
            return self.requirements.get(cmd), f"the reply nests deeper than the client reads ({exc})"
        if err is None:
            return None
        where = "/" + "/".join(str(p) for p in err.instance_path) if err.instance_path else ""
        return self.requirements.get(cmd), f"field {where or '(the reply)'}: {err.message}"[:300]
