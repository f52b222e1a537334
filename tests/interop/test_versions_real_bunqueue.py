"""The version matrix on two REAL releases, 2.8.39 (protocol 2) and 2.9.5 (protocol 3), from the
release cache (tests/interop/releases.py; `make test` installs both): `conform detect` names a
different profile for each, with the evidence, each is the one spec/profiles.yaml names for the
release, and the matrix of a case subset explains the changes between them by the diff of the
two profiles. All fourteen releases and every case: `make version-matrix`."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import releases  # noqa: E402
import version_matrix  # noqa: E402

from queuewire.conformance.versions import build_matrix  # noqa: E402

CASES = ["bunqueue.hello.*", "bunqueue.name.*", "bunqueue.events.pushed", "bunqueue.lock.ack-*"]


@pytest.fixture(scope="module")
def probed(tmp_path_factory: pytest.TempPathFactory):
    table = releases.described()
    out = []
    for version in ("2.8.39", "2.9.5"):
        if not releases.is_installed(version):
            pytest.fail(f"bunqueue {version} is not in the release cache "
                        f"({releases.cache_root()}): run `make setup`")
        out.append(version_matrix.probe(version, table[version],
                                        tmp_path_factory.mktemp(version), CASES))
    return out


def test_detect_names_a_different_profile_for_each_generation_with_its_evidence(probed):
    old, new = probed
    assert (old.profile, new.profile) == ("bunqueue/v2", "bunqueue/2.9.5")
    for rel in probed:
        assert rel.detect["best"] == rel.profile and rel.detect["clear"], rel.detect
    hello = {rel.version: next(p for p in rel.detect["probes"] if p["name"] == "Hello v3")
             for rel in probed}
    assert hello["2.8.39"]["observed"] == "ok protocolVersion=2 capabilities=['pipelining']"
    assert hello["2.9.5"]["observed"] == ("ok protocolVersion=3 capabilities=['pipelining', "
                                          "'separate-job-name']")
    events = {rel.version: next(p["observed"] for p in rel.detect["probes"]
                                if p["name"] == "command SubscribeEvents") for rel in probed}
    assert events == {"2.8.39": "unknown command", "2.9.5": "known"}


def test_the_matrix_explains_the_generation_change_by_the_profiles_diff(probed):
    m = build_matrix(probed, "bunqueue/v2")
    (_, _, changes), = m.changes
    by_case = {c.case: c for c in changes}
    # the protocol-3 cases run under 2.9.5's profile only; the lock fix of 2.8.59 is an
    # implementation change, which no profile difference explains
    assert by_case["bunqueue.events.pushed"].old is None and by_case["bunqueue.events.pushed"].explained
    assert by_case["bunqueue.name.separate"].explained
    assert not by_case["bunqueue.lock.ack-without-token"].explained
    assert m.grids["bunqueue/v2"]["bunqueue.hello.version"] == {"2.8.39": "PASS", "2.9.5": "FAIL"}
    assert m.grids["matching"]["bunqueue.hello.version"] == {"2.8.39": "PASS", "2.9.5": "PASS"}
