"""The quicx reference of one profile: an overview page (the 6-byte header with its packet
diagram, versions, roles, error codes, decoder errors, semantics flags, limits, state
machines), the messages page (every message type with its opcode, directions, payload rule,
layout fields, requirements, packet diagram (:mod:`.diagrams`), the MSG_ERROR replies it can
get (:mod:`.errors`) and the examples of the test vectors, decoded and as annotated hex
dumps) and the requirements page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..spec.quicx import DAEMON
from . import diagrams, examples
from .errors import ErrorLinks, error_message, quicx_links
from .machines import quicx_machines
from .requirements import requirements_page
from .text import (
    code,
    esc,
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


def packet(title: str, layout: Any) -> list[str]:
    """The packet diagram of a header or payload layout (:mod:`.diagrams`): integers to
    scale, a byte string longer than a row (or sized by the data) to the end of its row."""
    fields: list[tuple[str, int | None]] = []
    for f in layout:
        if f.width is not None and (f.is_int or 8 * f.width <= diagrams.BITS_PER_ROW):
            fields.append((f"{f.id} ({f.type})", 8 * f.width))
        else:  # sized by the data, or a byte string longer than a row: drawn to the row's end
            size = "rest of frame" if f.size_eos else f"{f.size} bytes"
            fields.append((f"{f.id} ({f.type}, {size})", None))
    return diagrams.packet(title, fields)


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


def error_replies(profile: Any, links: ErrorLinks, msg: Any) -> list[str]:
    """The MSG_ERROR replies ``msg`` can get (:mod:`.errors` derives them from the spec)."""
    model = profile.model
    carrier = error_message(model)
    kinds = model.protocol_errors
    specific, general = links.of(msg.name)
    lines = ["**Error replies**", ""]
    if msg.name in links.unanswered:
        name = carrier.name if carrier else "an error message"
        lines += [f"None in its own direction: the {DAEMON} does not receive it, and {name} "
                  f"goes only from the {DAEMON}. Sent to the {DAEMON} anyway, it is refused"
                  + (" with:" if specific else " as below."), ""]
    elif not specific:
        lines += ["None of its own: no decoder error of the spec names this message.", ""]
    if specific:
        lines += table(["decoder error", "error code", "requirement", "about"],
                       [[code(n), code(kinds[n].error_code), req_ref(profile, kinds[n].requirement),
                         esc(kinds[n].doc)] for n in specific])
    if general:
        lines += [f"Like any frame sent to the {DAEMON}, it can also be refused for its header "
                  f"or layout: {', '.join(code(n) for n in general)} (see "
                  f"{ref(profile.name, 'section', 'errors', 'error codes')}).", ""]
    return lines


def message_entry(profile: Any, msg: Any, links: ErrorLinks | None = None) -> list[str]:
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
    lines += error_replies(profile, links or quicx_links(profile), msg)
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
    lines += packet("quicx frame header", model.header)
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
    links = quicx_links(profile)
    for msg in sorted(profile.model.messages.values(), key=lambda m: m.code):
        lines += message_entry(profile, msg, links)
    write(base / "messages.md", lines, written)
    write(base / "requirements.md", requirements_page(profile), written)
    return write(base / "index.md", _overview(profile), written)
