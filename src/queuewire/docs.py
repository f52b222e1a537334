"""Render the spec into Markdown pages for the Sphinx docs.

The docs are generated, like the codecs: a page per profile with every command or message
(its doc line and fields, each with its one-line description), every requirement (id, level,
text, source and quote) and every state machine drawn from its transition table as a
Mermaid diagram. ``docs/conf.py`` calls ``render`` at build time, so the published pages can
never drift from ``spec/``. ``render_cases`` does the same for the conformance suite: a page
per profile listing every case (id, title, the requirements it cites) and the requirement ids
no case cites, read from the packaged cases.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .spec import load_profile, profile_names


def _esc(text: Any) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _roles(value: Any) -> str:
    return ", ".join(value) if isinstance(value, list) else str(value or "?")


def _fields(schema: Any, prefix: str = "") -> Iterable[tuple[str, str, str]]:
    for name, prop in (schema.get("properties") or {}).items():
        kind = prop.get("type") or (prop.get("$ref", "").rsplit("/", 1)[-1]) or "any"
        yield prefix + name, _esc(kind), _esc(prop.get("description", ""))


def _requirements(profile: Any) -> list[str]:
    lines = ["## Requirements", "", "| id | level | subject | text | source |",
             "|---|---|---|---|---|"]
    for req in profile.requirements.values():
        lines.append(f"| {req.id} | {req.level} | {req.subject} | {_esc(req.text)} | "
                     f"{req.source} § {_esc(req.section)} |")
    return lines + [""]


def _bunqueue(profile: Any) -> list[str]:
    model = profile.model
    lines = [f"# {profile.name}", "", profile.doc, ""]
    for machine in (model.job_lifecycle, model.connection_lifecycle):
        lines += [f"## {machine.name.replace('_', ' ').capitalize()}", "", machine.doc, "",
                  "```mermaid", machine.mermaid(), "```", ""]
    lines += _client_session()
    lines += ["## Limits", "", "| limit | min | max | value | unit | requirement | doc |",
              "|---|---|---|---|---|---|---|"]
    for lim in profile.limits.values():
        lines.append(f"| {lim.name} | {_esc(lim.min if lim.min is not None else '')} | "
                     f"{_esc(lim.max if lim.max is not None else '')} | "
                     f"{_esc(lim.value if lim.value is not None else lim.pattern or '')} | "
                     f"{lim.unit} | {lim.requirement or ''} | {_esc(lim.doc)} |")
    lines += ["", "## Commands", ""]
    for cmd in model.commands.values():
        lines += [f"### {cmd.name}", "", f"{_esc(cmd.doc)} ({cmd.requirement})", "",
                  "| request field | type | about |", "|---|---|---|"]
        lines += [f"| {n} | {t} | {d} |" for n, t, d in _fields(cmd.request)]
        lines += ["", "| reply field | type | about |", "|---|---|---|"]
        lines += [f"| {n} | {t} | {d} |" for n, t, d in _fields(cmd.response)]
        lines.append("")
    return lines + _requirements(profile)


def _client_session() -> list[str]:
    """The reference client's session table (queuewire.client.bunqueue_session), drawn from
    the same dict the session steps through, with each state's connection-lifecycle state."""
    from .client.bunqueue_session import SPEC_STATES, session_mermaid

    lines = ["## Reference client session", "",
             "The states of `queuewire.client`'s bunqueue session, drawn from "
             "`SESSION_TRANSITIONS`, the table its code steps through; the second table maps "
             "each onto the connection lifecycle above.", "",
             "```mermaid", session_mermaid(), "```", "",
             "| session state | connection lifecycle state |", "|---|---|"]
    lines += [f"| {state.name} | {spec} |" for state, spec in SPEC_STATES.items()]
    return lines + [""]


def _quicx(profile: Any) -> list[str]:
    tree = profile.tree
    lines = [f"# {profile.name}", "", profile.doc, "", "## Messages", ""]
    messages = sorted((tree.get("messages") or {}).items(), key=lambda kv: kv[1].get("code", 0))
    for name, msg in messages:
        code = msg.get("code")
        lines += [f"### 0x{code:02X} {name}" if isinstance(code, int) else f"### {name}", "",
                  f"{_esc(msg.get('doc', ''))} ({_roles(msg.get('from'))} → {_roles(msg.get('to'))})",
                  ""]
        layout = msg.get("layout") or []
        if layout:
            lines += ["| field | type | size | about |", "|---|---|---|---|"]
            for f in layout:
                size = f.get("size", "rest" if f.get("size-eos") else "")
                lines.append(f"| {f.get('id')} | {f.get('type')} | {_esc(size)} | "
                             f"{_esc(f.get('doc', ''))} |")
            lines.append("")
    lines += ["## Error codes", "", "| code | name | about |", "|---|---|---|"]
    for name, err in (tree.get("error_codes") or {}).items():
        lines.append(f"| 0x{err.get('code', 0):02X} | {name} | {_esc(err.get('doc', ''))} |")
    return lines + [""] + _requirements(profile)


def render(out_dir: str | Path) -> list[Path]:
    """Write one Markdown page per profile into ``out_dir``; return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in profile_names():
        profile = load_profile(name)
        lines = _bunqueue(profile) if profile.protocol == "bunqueue" else _quicx(profile)
        path = out / (name.replace("/", "_").replace(".", "_") + ".md")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(path)
    return written


def render_cases(out_dir: str | Path) -> list[Path]:
    """Write the conformance case catalogue, one Markdown page per profile, into ``out_dir``."""
    from .conformance.runner import load_cases

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for name in profile_names():
        profile = load_profile(name)
        cases = load_cases(profile.protocol, name)
        cited = {r for c in cases for r in c.requirements}
        uncited = [r for r in profile.requirements if r not in cited]
        lines = [f"# Conformance cases: {name}", "",
                 f"{len(cases)} cases cite {len(cited)} of the profile's "
                 f"{len(profile.requirements)} requirement ids. Run them with "
                 f"`queuewire conform server --protocol {profile.protocol} --profile {name} "
                 "--target HOST:PORT`.", "",
                 "| case | title | requirements |", "|---|---|---|"]
        lines += [f"| `{c.id}` | {_esc(c.title)}{' (INFO)' if c.info else ''} | "
                  f"{', '.join(c.requirements)} |" for c in cases]
        lines += ["", "## Requirement ids no case cites", ""]
        lines += [f"- {r} ({profile.requirements[r].subject}): "
                  f"{_esc(profile.requirements[r].text)}" for r in uncited] or ["None."]
        path = out / (name.replace("/", "_").replace(".", "_") + ".md")
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        written.append(path)
    return written
