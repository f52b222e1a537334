"""Lua source text: values written as Lua literals, deterministically, and the Lua every
generated dissector shares (raising an expert info, registering on the preferred port).

Every generated dissector starts with a ``SPEC`` table holding what it knows of the profile
(ports, limits, opcodes, layouts, the requirement each expert info cites). :func:`literal`
writes a Python value as a Lua literal with keys in sorted order, so the same spec gives the
same file byte for byte; :func:`spec_block` writes the whole table, one top-level key a line.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["EACH_FRAME", "EXPERT_FLAG", "PORT_REGISTRATION", "literal", "spec_block", "with_common"]

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_LUA_KEYWORDS = frozenset(
    "and break do else elseif end false for function goto if in local nil not or repeat "
    "return then true until while".split())


def _string(text: str) -> str:
    out = []
    for ch in text:
        code = ord(ch)
        if ch in '"\\':
            out.append("\\" + ch)
        elif 32 <= code < 127:
            out.append(ch)
        else:   # every other byte of its UTF-8 form as a decimal escape: plain ASCII source
            out.extend(f"\\{b}" for b in ch.encode("utf-8"))
    return '"' + "".join(out) + '"'


def _key(key: Any) -> str:
    if isinstance(key, str) and _NAME.match(key) and key not in _LUA_KEYWORDS:
        return key
    return f"[{literal(key)}]"


def literal(value: Any, indent: str = "") -> str:
    """``value`` (None, bool, int, float, str, a sequence or a mapping of them) as a Lua
    literal; mappings sorted by key, so the text depends on the value only."""
    if value is None:
        return "nil"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    inner = indent + "  "
    if isinstance(value, Mapping):
        if not value:
            return "{}"
        items = sorted(value.items(), key=lambda kv: (str(type(kv[0])), kv[0]))
        body = ",\n".join(f"{inner}{_key(k)} = {literal(v, inner)}" for k, v in items)
        return "{\n" + body + ",\n" + indent + "}"
    if isinstance(value, Sequence):
        if not value:
            return "{}"
        flat = [literal(v, inner) for v in value]
        if all("\n" not in s for s in flat) and sum(len(s) + 2 for s in flat) < 80:
            return "{" + ", ".join(flat) + "}"
        return "{\n" + ",\n".join(inner + s for s in flat) + ",\n" + indent + "}"
    raise TypeError(f"no Lua literal for {type(value).__name__}")


def spec_block(name: str, table: Mapping[str, Any]) -> str:
    """``local NAME = {...}``: the generated data a dissector reads."""
    return f"local {name} = {literal(table)}\n"


#: The Lua every dissector uses to raise an expert info of a protocol error kind, with an
#: optional message (``experts``: the kind -> ProtoExpert table the dissector built).
EXPERT_FLAG = """local function flag(item, kind, message)
  local e = experts[kind]
  if e == nil then return end
  if message then item:add_proto_expert_info(e, message) else item:add_proto_expert_info(e) end
end
"""

#: The Lua every dissector reassembles its frames with: ``head(off, total)`` reads the header
#: at ``off`` and gives the payload length, or nil and the info to stop with (a declared length
#: over the profile's bound, already flagged); ``body(off, length)`` dissects one whole frame
#: and gives its info. Frames cut by a segment ask Wireshark for the rest.
EACH_FRAME = """local function each_frame(tvb, pinfo, size, head, body)
  local total = tvb:len()
  local off, infos = 0, {}
  while off < total do
    if total - off < size then
      pinfo.desegment_offset, pinfo.desegment_len = off, DESEGMENT_ONE_MORE_SEGMENT
      break
    end
    local length, stop = head(off, total)
    if length == nil then
      table.insert(infos, stop)
      break
    end
    if total - off < size + length then
      pinfo.desegment_offset, pinfo.desegment_len = off, size + length - (total - off)
      break
    end
    table.insert(infos, body(off, length))
    off = off + size + length
  end
  if #infos > 0 then pinfo.cols.info = table.concat(infos, ", ") end
  return total
end
"""

#: The Lua that registers ``proto`` on the TCP port of its ``port`` preference (the profile's
#: default_port) and moves it when the preference changes.
PORT_REGISTRATION = """
local registered = nil
local function register()
  local tcp = DissectorTable.get("tcp.port")
  if registered ~= nil then tcp:remove(registered, proto) end
  registered = proto.prefs.port
  tcp:add(registered, proto)
end

function proto.prefs_changed()
  if registered ~= proto.prefs.port then register() end
end

register()
"""


def with_common(body: str) -> str:
    """A dissector's Lua with the shared pieces in place: ``$EXPERT_FLAG`` where its
    expert table is defined (the frame loop, :data:`EACH_FRAME`, with it), and the port
    registration at the end."""
    return body.replace("$EXPERT_FLAG\n", EXPERT_FLAG + EACH_FRAME) + PORT_REGISTRATION
