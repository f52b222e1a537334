"""Coverage-guided fuzzing of the codecs in process, with atheris (libFuzzer), for long runs.

``queuewire fuzz`` plays spec-generated cases against a server over TCP; this harness is its
in-process complement: libFuzzer mutates byte strings, guided by the branches they reach in
the codecs, and every input goes through the decoders the servers and the oracles use (the
bunqueue :class:`~queuewire.codecs.bunqueue.FrameDecoder` with request validation, the
:class:`~queuewire.codecs.quicx.QuicxDecoder`), judged by the oracles of the in-process codec
fuzz tests (``tests/fuzz/test_codec_fuzz.py``, ``tests/codecs``):

* nothing escapes but the codecs' typed errors (:class:`~queuewire.codecs.errors.ProtocolError`
  and its subclasses), each a kind of the profile's error table citing that
  kind's requirement;
* decoding does not depend on segmentation: the stream fed whole and fed in pieces gives the
  same messages;
* every decoded bunqueue request gets a verdict, and the validator's fast path agrees with
  its full check; a decoded request the encoder accepts round-trips (encoded, decoded again:
  one equal message, which encodes to the same bytes); a decoded quicx message encodes back
  to its own bytes.

The first byte of an input picks the segmentation (:data:`STEPS`) and, for quicx, the
receiving role; the rest is the stream. :func:`one_input` is a plain function: it runs (and
is tested) without atheris, which is only needed to fuzz::

    pip install 'queuewire[atheris]'
    python -m queuewire.fuzz.atheris_harness bunqueue -max_total_time=60 corpus-bq/
    python -m queuewire.fuzz.atheris_harness quicx -max_total_time=60 -max_len=512 corpus-qx/
    python -m queuewire.fuzz.atheris_harness bunqueue --seeds corpus-bq/ 200   # seed corpus

Everything after the protocol goes to libFuzzer (``-runs=``, ``-max_len=``, ``-jobs=``, a
corpus directory, a crash file to re-run). ``--seeds DIR N`` writes the streams of the first
N cases of ``queuewire fuzz``'s generator (seed 0) into DIR, a starting corpus.
"""

from __future__ import annotations

import os
import sys
from typing import Any

from ..codecs.bunqueue import FrameDecoder, FrameEncoder
from ..codecs.errors import ProtocolError
from ..codecs.quicx import QuicxDecoder, QuicxEncoder
from ..codecs.validation import BunqueueValidator
from ..spec import Profile, load_profile

PROFILES = {"bunqueue": "bunqueue/v2", "quicx": "quicx/v1"}
STEPS = (None, 1, 2, 3, 5, 7, 11, 64)   # the first byte's low 3 bits: whole, or piece size


def decode_all(decoder: Any, data: bytes, step: int | None,
               check: Any = None) -> tuple[list[Any], list[str]]:
    """Messages and error kinds of ``data`` fed to ``decoder`` whole or ``step`` bytes at a
    time; only the codecs' typed errors are caught (each passed to ``check`` first), and
    decoding stops at an error whose reaction is to close."""
    out: list[Any] = []
    kinds: list[str] = []
    chunks = [data] if step is None else [data[i:i + step] for i in range(0, len(data), step)]
    for chunk in chunks:
        pending = chunk
        while True:
            try:
                out += decoder.feed(pending)
                break
            except ProtocolError as err:
                if check is not None:
                    check(err)
                out += err.frames
                kinds.append(err.kind)
                if err.reaction == "close":
                    return out, kinds
                pending = b""
    return out, kinds


class Harness:
    """The codecs of one profile and the checks of :func:`one_input`."""

    def __init__(self, protocol: str, profile: Profile | str | None = None):
        if protocol not in PROFILES:
            raise ValueError(f"protocol {protocol!r} is none of {sorted(PROFILES)}")
        self.protocol = protocol
        self.profile = profile if isinstance(profile, Profile) else \
            load_profile(profile or PROFILES[protocol])
        spec = self.profile.model
        self.errors = {k: e.requirement for k, e in spec.protocol_errors.items()}
        if protocol == "bunqueue":
            self.validator = BunqueueValidator(self.profile)
            self.encoder: Any = FrameEncoder(self.profile)
        else:
            self.encoder = QuicxEncoder(self.profile)
            self.clients = tuple(r for r in self.encoder.spec.roles if r != "daemon")

    def _decoder(self, selector: int) -> Any:
        if self.protocol == "bunqueue":
            return FrameDecoder(self.profile)
        return QuicxDecoder(self.profile, self.clients if selector & 8 else "daemon")

    def decode(self, data: bytes, step: int | None, selector: int = 0
               ) -> tuple[list[Any], list[str]]:
        """Messages and error kinds of ``data`` fed whole or ``step`` bytes at a time; only
        the codecs' typed errors are caught, each checked against the profile's table."""
        return decode_all(self._decoder(selector), data, step, self._check_error)

    def _check_error(self, err: ProtocolError) -> None:
        assert err.kind in self.errors, f"error kind {err.kind!r} not in the spec"
        assert err.requirement == self.errors[err.kind], \
            f"{err.kind} cites {err.requirement}, the spec {self.errors[err.kind]}"

    def one_input(self, data: bytes) -> None:
        """The oracles over one input (see the module docstring); an AssertionError or any
        exception other than a typed codec error is a finding."""
        if not data:
            return
        selector, stream = data[0], bytes(data[1:])
        step = STEPS[selector & 7]
        whole, kinds = self.decode(stream, None, selector)
        if step is not None:
            pieces, _ = self.decode(stream, step, selector)
            if self.protocol == "bunqueue":
                assert repr(pieces) == repr(whole), "messages depend on segmentation"
            else:
                assert [m.raw for m in pieces] == [m.raw for m in whole], \
                    "messages depend on segmentation"
        if self.protocol == "bunqueue":
            for msg in whole:
                self._check_request(msg)
        else:
            for msg in whole:
                self._check_quicx(msg)

    def _check_request(self, msg: Any) -> None:
        assert type(msg) is dict, f"a frame decoded to {type(msg).__name__}"
        violations = self.validator.request_violations(msg)
        assert self.validator.request_is_valid(msg) == (not violations), \
            f"request_is_valid disagrees with {violations[:1]} on {msg!r:.200}"
        try:
            raw = self.encoder.encode(msg)
        except ProtocolError:
            return   # a value the encoder refuses (BQ-MSGPACK-7): typed, and no round trip
        again = FrameDecoder(self.profile).feed(raw)
        assert len(again) == 1, f"re-encoded request decoded to {len(again)} messages"
        assert self.encoder.encode(again[0]) == raw, f"round trip changed {msg!r:.200}"

    def _check_quicx(self, msg: Any) -> None:
        try:
            raw = self.encoder.encode(msg.name, **msg.fields)
        except ProtocolError as err:
            raise AssertionError(f"decoded {msg.name} does not encode: {err}") from None
        assert raw == msg.raw, f"{msg.name} re-encodes to other bytes"


_HARNESS: dict[str, Harness] = {}


def one_input(data: bytes, protocol: str = "bunqueue") -> None:
    """libFuzzer's TestOneInput for ``protocol`` (harnesses built once, reused)."""
    harness = _HARNESS.get(protocol)
    if harness is None:
        harness = _HARNESS[protocol] = Harness(protocol)
    harness.one_input(data)


def write_seeds(directory: str, protocol: str, n: int) -> int:
    """The streams of cases ``0 .. n-1`` of ``queuewire fuzz``'s generator (seed 0), each
    behind a selector byte, as a starting corpus; needs hypothesis (the ``fuzz`` extra)."""
    from .strategies import make_case
    os.makedirs(directory, exist_ok=True)
    for i in range(n):
        case = make_case(protocol, PROFILES[protocol], 0, i)
        with open(os.path.join(directory, f"case-{i}"), "wb") as fh:
            fh.write(bytes([i % 256]) + case.stream)
    return n


def main(argv: list[str] | None = None) -> None:
    argv = list(sys.argv if argv is None else argv)
    if len(argv) < 2 or argv[1] not in PROFILES:
        sys.exit(f"usage: {os.path.basename(argv[0])} bunqueue|quicx [--seeds DIR N] "
                 f"[libFuzzer options] [corpus dirs]")
    protocol = argv.pop(1)
    if argv[1:2] == ["--seeds"]:
        print(f"{write_seeds(argv[2], protocol, int(argv[3]))} seeds in {argv[2]}")
        return
    try:
        import atheris
    except ImportError:
        sys.exit("the coverage-guided harness needs atheris: pip install 'queuewire[atheris]'")
    harness = Harness(protocol)
    # the codecs and the spec, loaded above, are what it steers by (types-atheris declares
    # instrument_all in atheris.instrument_bytecode only, not where atheris exports it)
    atheris.instrument_all()  # type: ignore[attr-defined]
    atheris.Setup(argv, harness.one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
