"""The conformance case catalogue: a page per profile listing every packaged case (id, title,
the requirements it cites) and the requirement ids no case cites."""

from __future__ import annotations

from pathlib import Path

from ..spec import load_profile, profile_names
from .text import esc, stem, write_text


def render_cases(out_dir: str | Path) -> list[Path]:
    """Write the conformance case catalogue, one Markdown page per profile, into ``out_dir``."""
    from ..conformance.runner import load_cases

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
        lines += [f"| `{c.id}` | {esc(c.title)}{' (INFO)' if c.info else ''} | "
                  f"{', '.join(c.requirements)} |" for c in cases]
        lines += ["", "## Requirement ids no case cites", ""]
        lines += [f"- {r} ({profile.requirements[r].subject}): "
                  f"{esc(profile.requirements[r].text)}" for r in uncited] or ["None."]
        path = out / (stem(name) + ".md")
        write_text(path, "\n".join(lines) + "\n")
        written.append(path)
    return written
