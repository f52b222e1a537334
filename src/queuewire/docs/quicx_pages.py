"""The quicx reference of one profile: an overview page (the 6-byte header with its packet
diagram, versions, roles, error codes, decoder errors, semantics flags, limits, state
machines), the messages page (every message type with its opcode, directions, payload rule,
layout fields, requirements, packet diagram and the examples of the test vectors, decoded
and as annotated hex dumps) and the requirements page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..spec.quicx import DAEMON
from . import examples
from .machines import quicx_machines
from .requirements import requirements_page
from .text import (
    code,
    esc,
    fence,
    limits_table,
    ref,
    req_ref,
    requirement_table,
    stem,
    table,
    target,
    toctree,
    write,
)

VARIABLE_BITS = 32  # how wide a packet diagram draws a field whose size depends on the data


def packet(title: str, layout: Any, bits_per_row: int = 64) -> list[str]:
    """A Mermaid ``packet-beta`` diagram of a header or payload layout (bit ranges), with
    ``bits_per_row`` bits a row (an init directive: MyST would read a YAML front matter as
    the directive's options)."""
    lines = [f'%%{{init: {{"packet": {{"bitsPerRow": {bits_per_row}}}}}}}%%', "packet-beta",
             f"title {title}"]
    bit = 0
    for f in layout:
        if f.width is not None:
            bits = 8 * f.width
            label = f"{f.id} ({f.type})"
        else:
            bits = VARIABLE_BITS
            size = "rest of frame" if f.size_eos else f"{f.size} bytes"
            label = f"{f.id} ({f.type}, {size})"
        lines.append(f'{bit}-{bit + bits - 1}: "{label}"')
        bit += bits
    return fence("mermaid", "\n".join(lines))


def _size(f: Any) -> str:
    if f.width is not None:
        return str(f.width)
    return "rest" if f.size_eos else f"`{f.size}`"


def layout_table(profile: Any, layout: Any) -> list[str]:
    rows = []
    for f in layout:
        limit = ""
        if f.max_size:
            limit = f"max {f.max_bytes if f.max_bytes is not None else 'unbounded'} ({code(f.max_size)})"
        elif f.is_int:
            limit = f"0 to {f.max_value}"
        extra = [f"encoding {f.encoding}"] if f.encoding else []
        extra += [f"values: {f.enum}"] if f.enum else []
        rows.append([code(f.id), f.type, _size(f), esc("; ".join([limit] + extra if limit else extra)),
                     esc(f.doc), req_ref(profile, f.requirement)])
    return table(["field", "type", "size (bytes)", "limits", "about", "requirement"], rows)


def _directions(msg: Any) -> str:
    """``producer, worker → daemon; daemon → worker``: senders to the daemon, then the
    daemon's receivers."""
    to_daemon = sorted(s for s, r in msg.directions if r == DAEMON)
    from_daemon = sorted(r for s, r in msg.directions if s == DAEMON)
    parts = []
    if to_daemon:
        parts.append(f"{', '.join(to_daemon)} → {DAEMON}")
    if from_daemon:
        parts.append(f"{DAEMON} → {', '.join(from_daemon)}")
    return "; ".join(parts)


def message_entry(profile: Any, msg: Any) -> list[str]:
    name = profile.name
    lines = [target(name, "msg", msg.name), f"## 0x{msg.code:02X} {msg.name}", "", esc(msg.doc), ""]
    facts = [["opcode", f"`0x{msg.code:02X}`"], ["directions", _directions(msg)],
             ["payload", msg.payload + (f" ({msg.fixed_size} bytes)" if msg.fixed_size else "")],
             ["transport", msg.transport]]
    if msg.reserved:
        facts.append(["reserved", "yes: the opcode is taken but the message is never sent"])
    if msg.doc_ref:
        facts.append(["source", code(msg.doc_ref)])
    lines += table(["", ""], facts)
    kinds = [profile.model.protocol_errors[k].requirement for k in msg.errors.values()]
    kinds += [profile.model.protocol_errors[k].requirement
              for f in msg.layout for k in f.errors.values()]
    reqs = [msg.requirement] + [f.requirement for f in msg.layout] + kinds
    lines += ["**Requirements**", ""] + requirement_table(profile, reqs)
    if msg.layout:
        lines += ["**Payload layout**", ""] + layout_table(profile, msg.layout)
        lines += packet(f"{msg.name} payload", msg.layout)
    else:
        lines += ["**Payload layout**: none (the header's `len_payload` is 0).", ""]
    found = examples.quicx_examples(profile, msg.name)
    if not found:
        why = ("it is reserved: never sent" if msg.reserved else
               f"it is carried on the {msg.transport} socket, and the vectors are frames of "
               f"the profile's {profile.model.transport} port" if msg.transport != profile.model.transport
               else "the test vectors have no frame of it in this profile")
        lines += [f"**Example**: none ({why}).", ""]
    for directions, vec in found:
        lines += [f"**Example** ({', '.join(d.replace('->', ' → ') for d in directions)}; "
                  f"vector `{vec['id']}`)", ""]
        lines += examples.quicx_dump(profile, vec, f"{msg.name} {directions[0]}")
    return lines


def _overview(profile: Any) -> list[str]:
    model, tree, name = profile.model, profile.tree, profile.name
    lines = [target(name, "page", "overview"), f"# {name}", "", esc(profile.doc), ""]
    if profile.overlays:
        lines += [f"Built from the quicx base and the overlay(s) "
                  f"{', '.join(code(o) for o in profile.overlays)} "
                  "(see {doc}`the profile comparison <../compare>`).", ""]
    lines += table(["property", "value"], [
        ["title", esc(model.title)], ["default port", model.default_port],
        ["transport", model.transport], ["header version", f"`0x{model.version:02X}`"],
        ["accepted versions", ", ".join(f"`0x{v:02X}`" for v in sorted(model.accepted_versions))],
        ["messages", len(model.messages)], ["requirements", len(profile.requirements)]])
    lines += toctree(["messages", "requirements"], "Reference")
    hdr = tree["header"]
    lines += [target(name, "section", "framing"), "## Framing: the frame header", "",
              esc(hdr.get("doc", "")), f"({req_ref(profile, hdr.get('requirement'))})", ""]
    lines += packet("quicx frame header", model.header,
                    bits_per_row=8 * model.header_size)
    lines += layout_table(profile, model.header)
    versions = tree.get("versions") or {}
    lines += [esc(versions.get("doc", "")), f"({req_ref(profile, versions.get('requirement'))})", ""]
    lines += ["## Roles", ""] + table(["role", "about"],
                                      [[code(k), esc(v)] for k, v in model.roles.items()])
    lines += ["## Message types", ""] + table(
        ["opcode", "message", "directions", "payload", "about"],
        [[f"`0x{m.code:02X}`", ref(name, "msg", m.name),
          _directions(m), m.payload + (" (reserved)" if m.reserved else ""), esc(m.doc)]
         for m in sorted(model.messages.values(), key=lambda m: m.code)])
    lines += [target(name, "section", "errors"), "## Error codes", "",
              "The `error_code` byte of MSG_ERROR:", ""]
    lines += table(["code", "name", "requirement", "about"],
                   [[f"`0x{e.code:02X}`", code(e.name), req_ref(profile, e.requirement), esc(e.doc)]
                    for e in model.error_codes.values()])
    lines += ["## Decoder errors", "",
              "What a receiver reports for a frame that breaks a rule, the daemon's reaction "
              "(`close`, `reply` with MSG_ERROR and the code below, or `raise` locally):", ""]
    lines += table(["kind", "reaction", "MSG_ERROR code", "requirement", "about"],
                   [[code(k.name), k.reaction, code(k.error_code or ""),
                     req_ref(profile, k.requirement), esc(k.doc)]
                    for k in model.protocol_errors.values()])
    lines += ["## Semantics flags", "",
              "Behaviours that differ between profiles; servers and clients read these flags "
              "rather than the profile's name.", ""]
    lines += table(["flag", "value", "requirement", "about"],
                   [[code(f.name), code(f.value), req_ref(profile, f.requirement), esc(f.doc)]
                    for f in model.semantics.values()])
    lines += limits_table(profile)
    return lines + quicx_machines(profile)


def render_profile(profile: Any, out: Path, written: list[Path]) -> Path:
    base = out / stem(profile.name)
    lines = [f"# {profile.name}: messages", "",
             "Every message type of the profile in opcode order. Each frame is the 6-byte "
             "header of the {doc}`overview <index>` followed by the payload below.", ""]
    for msg in sorted(profile.model.messages.values(), key=lambda m: m.code):
        lines += message_entry(profile, msg)
    write(base / "messages.md", lines, written)
    write(base / "requirements.md", requirements_page(profile), written)
    return write(base / "index.md", _overview(profile), written)
