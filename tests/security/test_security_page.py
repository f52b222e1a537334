"""docs/security.md states every tool bound with its default: each value on the page is the
code's (issue 22, "each limit with its default and why"), and every server safeguard the
page names is one the spec defines."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

from queuewire.spec import load_profile

PAGE = Path(__file__).resolve().parents[2] / "docs" / "security.md"
UNITS = {"KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}


def _values(cell: str) -> list[int]:
    """The numbers of a 'default' cell, in order: ``4000 events, 48 MiB`` -> [4000, 48 MiB]."""
    out = []
    for number, unit in re.findall(r"(\d+)\s*(KiB|MiB|GiB)?", cell):
        out.append(int(number) * UNITS.get(unit, 1))
    return out


def _constants(cell: str) -> list[object]:
    """The constants a 'where' cell names: ``mod.A`` then bare ``B`` in the same module."""
    module, out = None, []
    for name in re.findall(r"`([\w.]+)`", cell.split("(")[0]):
        if "." in name:
            module, name = name.rsplit(".", 1)
        out.append(getattr(importlib.import_module(module), name))
    return out


def test_every_tool_bound_on_the_page_is_the_codes_value():
    rows = [line.split("|")[1:-1] for line in PAGE.read_text().splitlines()
            if line.startswith("| ") and "`queuewire." in line]
    assert len(rows) >= 15
    for bound, default, where, _why in rows:
        values, constants = _values(default), _constants(where)
        assert constants, bound
        if len(values) == len(constants):
            assert values == constants, (bound, values, constants)
        else:  # one default shared by the constants named
            assert len(values) == 1 and all(c == values[0] for c in constants), (bound, values,
                                                                                 constants)


def test_every_safeguard_the_page_names_is_in_the_spec():
    named = set(re.findall(r"`(\w+)`", PAGE.read_text().split("## The server's safeguards")[1]
                           .split("##")[0]))
    safeguards = set(load_profile("bunqueue/v2").model.safeguards)
    assert {"cron_schedule_chars", "max_parked_polls", "pre_auth_frame_bytes"} <= named
    missing = safeguards - named
    assert not missing, f"safeguards the page does not explain: {sorted(missing)}"
