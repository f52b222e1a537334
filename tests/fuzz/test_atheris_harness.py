"""The coverage-guided harness runs without atheris: its one-input function holds its
oracles over a few hundred inputs (the fuzzer's own case streams, random bytes, and those
streams with bytes flipped), and it does catch what it is there to catch."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from queuewire.codecs.errors import ProtocolError
from queuewire.fuzz import atheris_harness
from queuewire.fuzz.atheris_harness import Harness, one_input
from queuewire.fuzz.strategies import make_case

PROFILES = {"bunqueue": "bunqueue/v2", "quicx": "quicx/v1"}


def _inputs(protocol: str) -> list[bytes]:
    rng = random.Random(7)
    cases = [bytes([i]) + make_case(protocol, PROFILES[protocol], 5, i).stream
             for i in range(60)]
    flipped = []
    for _ in range(120):
        b = bytearray(rng.choice(cases))
        for _ in range(rng.randint(1, 3)):
            b[rng.randrange(len(b))] = rng.randrange(256)
        flipped.append(bytes(b))
    return [b"", *cases, *flipped, *(rng.randbytes(rng.randint(1, 40)) for _ in range(120))]


@pytest.mark.parametrize("protocol", sorted(PROFILES))
def test_one_input_holds_over_generated_random_and_flipped_inputs(protocol):
    inputs = _inputs(protocol)
    assert len(inputs) > 300
    decoded = 0
    harness = Harness(protocol)
    for data in inputs:
        one_input(data, protocol)
        if data:
            decoded += len(harness.decode(data[1:], None, data[0])[0])
    assert decoded > 50   # the inputs reach the decoders' message paths, not only errors


def test_an_error_the_spec_does_not_know_is_a_finding():
    harness = Harness("bunqueue")
    known = harness.profile.model.protocol_errors["truncated_frame"]
    harness._check_error(ProtocolError(known, "ok"))
    with pytest.raises(AssertionError, match="not in the spec"):
        harness._check_error(ProtocolError(replace(known, name="no_such_kind"), "x"))
    with pytest.raises(AssertionError, match="cites BQ-X-1"):
        harness._check_error(ProtocolError(known, "x", requirement="BQ-X-1"))


def test_segmentation_dependence_is_a_finding():
    class Flaky(Harness):
        def decode(self, data, step, selector=0):
            out, kinds = super().decode(data, step, selector)
            return (out[:-1] if step is not None else out), kinds

    stream = make_case("bunqueue", "bunqueue/v2", 5, 0).stream
    harness = Flaky("bunqueue")
    assert harness.decode(stream, None)[0]
    with pytest.raises(AssertionError, match="segmentation"):
        harness.one_input(bytes([1]) + stream)


def test_the_entry_point_needs_atheris_only_to_fuzz(tmp_path, monkeypatch):
    atheris_harness.main(["h", "bunqueue", "--seeds", str(tmp_path), "5"])
    assert len(list(tmp_path.iterdir())) == 5
    for path in tmp_path.iterdir():
        one_input(path.read_bytes(), "bunqueue")
    with pytest.raises(SystemExit, match="usage"):
        atheris_harness.main(["h"])
    monkeypatch.setitem(__import__("sys").modules, "atheris", None)
    with pytest.raises(SystemExit, match="atheris"):
        atheris_harness.main(["h", "quicx"])
