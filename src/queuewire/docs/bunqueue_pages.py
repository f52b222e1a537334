"""The bunqueue reference of one profile: an overview page (framing, MessagePack rules,
envelope, limits, error strings, decoder errors, state machines), a page per command
category (every command with its requirements, request and reply fields, error replies
(:mod:`.errors`), and the request and reply examples of the test vectors, decoded and as
annotated hex dumps), the typical session (:mod:`.session`) and the requirements page."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import diagrams, examples
from .errors import ErrorLinks, bunqueue_links
from .machines import bunqueue_machines
from .requirements import requirements_page
from .schema import all_requirements, fields
from .session import session_page
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


def field_table(profile: Any, schema: Any) -> list[str]:
    rows = [[code(f.path), esc(f.type), "yes" if f.required else "", esc(f.limits),
             code(f.default) if f.default else "", esc(f.doc),
             ", ".join(req_ref(profile, r) for r in f.requirements)]
            for f in fields(schema)]
    if not rows:
        return ["No fields.", ""]
    return table(["field", "type", "required", "limits", "default", "about", "requirement"], rows)


def _frame_packet(profile: Any) -> list[str]:
    """The frame's packet diagram (:mod:`.diagrams`): the fixed-width prefix, then the
    payload, whose size is the prefix's value."""
    fields: list[tuple[str, int | None]] = []
    for f in profile.tree["framing"]["fields"]:
        if f["type"].startswith("u") and f["type"][1:].rstrip("be").isdigit():
            fields.append((f'{f["id"]} ({f["type"]})', 8 * int(f["type"][1:].rstrip("be"))))
        else:
            fields.append((f'{f["id"]} ({f.get("size", "rest")} bytes, '
                           f'{f.get("encoding", f["type"])})', None))
    return diagrams.packet("bunqueue frame", fields)


def _overview(profile: Any, categories: list[str]) -> list[str]:
    model, tree = profile.model, profile.tree
    name = profile.name
    lines = [target(name, "page", "overview"), f"# {name}", "", esc(profile.doc), ""]
    if profile.overlays:
        lines += [f"Built from the bunqueue base and the overlay(s) "
                  f"{', '.join(code(o) for o in profile.overlays)} "
                  "(see {doc}`the profile comparison <../compare>`).", ""]
    lines += table(["property", "value"], [
        ["default TCP port", model.default_port], ["default HTTP port", model.default_http_port],
        ["protocol version", model.protocol_version],
        ["capabilities", ", ".join(code(c) for c in model.capabilities)],
        ["commands", len(model.commands)], ["requirements", len(profile.requirements)]])
    lines += toctree(["session"] + [f"commands-{c}" for c in categories] + ["requirements"],
                     "Reference")
    framing = tree["framing"]
    lines += [target(name, "section", "framing"), "## Framing", "", esc(framing.get("doc", "")),
              f"({req_ref(profile, framing.get('requirement'))})", ""]
    lines += _frame_packet(profile)
    lines += table(["field", "type", "size", "about", "requirement"],
                   [[code(f["id"]), f["type"], esc(f.get("size", "")), esc(f.get("doc", "")),
                     req_ref(profile, f.get("requirement"))] for f in framing["fields"]])
    lines += [f"A frame's payload is at most `max_frame_bytes` = {model.max_frame_bytes} bytes.", ""]
    mp = tree["msgpack"]
    lines += ["## MessagePack rules", "", esc(mp.get("doc", "")), ""]
    lines += table(["rule", "about", "requirement"],
                   [[code(k), esc(v.get("doc", "")), req_ref(profile, v.get("requirement"))]
                    for k, v in (mp.get("rules") or {}).items()])
    lines += table(["extension", "type", "about"],
                   [[code(k), v.get("type"), esc(v.get("doc", ""))]
                    for k, v in (mp.get("extensions") or {}).items()])
    env = tree["envelope"]
    lines += ["## Envelope", "", esc(env.get("doc", "")), "", "Every request carries:", ""]
    lines += field_table(profile, {"properties": env["request"]})
    lines += ["Every successful reply carries:", ""]
    lines += field_table(profile, {"properties": env["reply"]})
    lines += ["A failed command is answered by the error reply:", ""]
    lines += field_table(profile, model.error_reply)
    lines += limits_table(profile) + _safeguards(profile) + _errors(profile) + _job_states(profile)
    if tree.get("job_events"):
        ev = tree["job_events"]
        lines += ["## Pushed job events", "", esc(ev.get("doc", "")),
                  f"({req_ref(profile, ev.get('requirement'))})", ""]
        lines += field_table(profile, dict(ev["frame"], **{"$defs": dict(model.definitions)}))
        lines += table(["event type", "about", "fields"],
                       [[code(k), esc(v.get("doc", "")), ", ".join(code(f) for f in v.get("fields", ()))]
                        for k, v in (ev.get("types") or {}).items()])
    return lines + bunqueue_machines(profile)


def _safeguards(profile: Any) -> list[str]:
    """The server's own bounds (protocol.yaml ``safeguards``): a queuewire decision, never
    judged against another server; docs/security.md links here for the values."""
    section = profile.tree.get("safeguards") or {}
    rows = [[code(k), v["value"], esc(v.get("unit", "")), esc(v.get("doc", ""))]
            for k, v in section.items() if isinstance(v, dict) and "value" in v]
    if not rows:
        return []
    return [target(profile.name, "section", "safeguards"), "## Safeguards", "",
            esc(section.get("doc", "")), f"({req_ref(profile, section.get('requirement'))})",
            ""] + table(["safeguard", "value", "unit", "why"], rows)


def _errors(profile: Any) -> list[str]:
    model = profile.model
    lines = [target(profile.name, "section", "errors"), "## Error strings", "",
             "The `error` text of an error reply, for each refusal the documents name:", ""]
    lines += table(["error", "message", "requirement", "about"],
                   [[code(e.name), code(e.message), req_ref(profile, e.requirement), esc(e.doc)]
                    for e in model.errors.values()])
    lines += ["## Decoder errors", "",
              "What a receiver reports for bytes that break the framing or the MessagePack "
              "rules, and the reaction the protocol demands (`close` the connection, `reply` "
              "with an error and go on, `raise` locally):", ""]
    lines += table(["kind", "reaction", "requirement", "about"],
                   [[code(k.name), k.reaction, req_ref(profile, k.requirement), esc(k.doc)]
                    for k in model.protocol_errors.values()])
    return lines


def _job_states(profile: Any) -> list[str]:
    return ["## Job states", ""] + table(
        ["state", "about"], [[code(k), esc(v)] for k, v in profile.model.job_states.items()])


def error_replies(profile: Any, links: ErrorLinks, cmd: Any) -> list[str]:
    """The error replies ``cmd`` can get (:mod:`.errors` derives them from the spec)."""
    errors = profile.model.errors
    specific, general = links.of(cmd.name)
    lines = ["**Error replies**", ""]
    if specific:
        lines += table(["error", "message", "requirement", "about"],
                       [[code(n), code(errors[n].message), req_ref(profile, errors[n].requirement),
                         esc(errors[n].doc)] for n in specific])
    else:
        lines += ["None of its own: no error of the spec names this command.", ""]
    if general:
        lines += [f"Like any request, it can also be refused before the command runs with "
                  f"{', '.join(code(n) for n in general)} (see "
                  f"{ref(profile.name, 'section', 'errors', 'error strings')}).", ""]
    return lines


def command_entry(profile: Any, cmd: Any, links: ErrorLinks | None = None) -> list[str]:
    lines = [target(profile.name, "cmd", cmd.name), f"## {cmd.name}", "", esc(cmd.doc), ""]
    if cmd.doc_ref:
        lines += [f"Source: {code(cmd.doc_ref)}.", ""]
    reqs = [cmd.requirement] + all_requirements(dict(cmd.request)) + \
        all_requirements(dict(cmd.response))
    lines += ["**Requirements**", ""] + requirement_table(profile, reqs)
    lines += ["**Request fields**", ""] + field_table(profile, cmd.request)
    lines += ["**Reply fields**", ""] + field_table(profile, cmd.response)
    lines += error_replies(profile, links or bunqueue_links(profile), cmd)
    for direction in ("request", "reply"):
        vec = examples.bunqueue_example(profile, cmd.name, direction)
        lines += [f"**{direction.capitalize()} example** (vector `bq.cmd.{cmd.name}.{direction}`)", ""]
        if vec is None:
            lines += ["No vector (its frame is over 64 KiB).", ""]
            continue
        lines += examples.bunqueue_dump(profile, vec, f"{cmd.name} {direction}")
    return lines


def render_profile(profile: Any, out: Path, written: list[Path]) -> Path:
    """Write the profile's pages under ``out/<stem>/``; return its index page."""
    base = out / stem(profile.name)
    by_cat: dict[str, list] = {}
    for cmd in profile.model.commands.values():
        by_cat.setdefault(cmd.category or "other", []).append(cmd)
    links = bunqueue_links(profile)
    for cat, cmds in by_cat.items():
        lines = [f"# {profile.name}: {cat} commands", "",
                 f"The {cat} commands of {profile.name}; the framing and envelope they share "
                 f"are on the {{doc}}`overview <index>`. A command's error replies are the "
                 "errors of the spec whose description names it (or, where that list is left "
                 "open, whose requirement does), and those a conformance case expects of it.",
                 ""]
        for cmd in cmds:
            lines += command_entry(profile, cmd, links)
        write(base / f"commands-{cat}.md", lines, written)
    write(base / "session.md", session_page(profile), written)
    write(base / "requirements.md", requirements_page(profile), written)
    return write(base / "index.md", _overview(profile, list(by_cat)), written)
