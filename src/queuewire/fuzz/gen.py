"""Seeded value generators: the fuzzer's own, each with its hypothesis twin.

A :class:`Gen` is two things: ``sample(random.Random)``, a plain function that campaigns call
(cheap, no hypothesis machinery per case), and ``strategy``, the equivalent hypothesis
strategy built from hypothesis' public API on first use (the tests run the fuzzer's generator
functions under ``@given``, where hypothesis shrinks). The generator functions of
:mod:`.strategies` take a *draw* and call it with Gens, so one function serves both:

* :class:`SeededDraw` samples from ``random.Random(f"{seed}:{index}")``: a case is a pure
  function of ``(seed, index)`` for one queuewire version, on any machine and with any
  hypothesis version (campaigns, ``--seed N --start I``, the atheris seed corpus);
* :class:`HypothesisDraw` hands each Gen's strategy to a ``@st.composite`` draw
  (:func:`composite`).

The samplers lean to the values that find bugs, as hypothesis does: integers at and next to
their bounds, zero, one and powers of two; floats' special values; strings with control
characters, non-ASCII and astral code points (never surrogates, which no UTF-8 encoder
writes); lengths mostly short, sometimes at the bound.
"""

from __future__ import annotations

import math
import random
import struct
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any

from hypothesis import strategies as st

Sampler = Callable[[random.Random], Any]


class Gen:
    """A sampler over ``random.Random`` and, built lazily, its hypothesis strategy."""

    __slots__ = ("sample", "_build", "_strategy")

    def __init__(self, sample: Sampler, build: Callable[[], st.SearchStrategy]):
        self.sample = sample
        self._build = build
        self._strategy: st.SearchStrategy | None = None

    @property
    def strategy(self) -> st.SearchStrategy:
        if self._strategy is None:
            self._strategy = self._build()
        return self._strategy

    def map(self, fn: Callable[[Any], Any]) -> Gen:
        sample = self.sample
        return Gen(lambda r: fn(sample(r)), lambda: self.strategy.map(fn))


class SeededDraw:
    """The campaigns' draw: every Gen sampled from one ``random.Random`` keyed by
    ``(seed, index)``, so the values are a pure function of the key."""

    __slots__ = ("random",)

    def __init__(self, seed: int | str, index: int | str):
        self.random = random.Random(f"{seed}:{index}")

    def __call__(self, gen: Gen) -> Any:
        return gen.sample(self.random)


class HypothesisDraw:
    """The tests' draw: each Gen's strategy drawn by a ``@st.composite`` draw."""

    __slots__ = ("draw",)

    def __init__(self, draw: Callable[[st.SearchStrategy], Any]):
        self.draw = draw

    def __call__(self, gen: Gen) -> Any:
        return self.draw(gen.strategy)


def composite(fn: Callable[..., Any], *args: Any) -> st.SearchStrategy:
    """The hypothesis strategy of the generator function ``fn(draw, *args)``."""
    @st.composite
    def build(draw: Any) -> Any:
        return fn(HypothesisDraw(draw), *args)
    return build()


# -- scalars -----------------------------------------------------------------------------------
BOOL = Gen(lambda r: r.random() < 0.5, st.booleans)
NONE = Gen(lambda r: None, st.none)


def just(value: Any) -> Gen:
    return Gen(lambda r: value, lambda: st.just(value))


@lru_cache(maxsize=8192)
def ints(lo: int, hi: int) -> Gen:
    """Uniform over ``[lo, hi]`` (the case's own choices: counts, indices, sizes)."""
    return Gen(lambda r: r.randint(lo, hi), lambda: st.integers(lo, hi))


@lru_cache(maxsize=1024)
def pick(options: tuple) -> Gen:
    return Gen(lambda r: r.choice(options), lambda: st.sampled_from(options))


@lru_cache(maxsize=1024)
def values(lo: int, hi: int) -> Gen:
    """Integers of ``[lo, hi]`` leaning to the interesting ones: the bounds and their
    neighbours, zero and one, small values, powers of two and their neighbours."""
    special = tuple(sorted({v for v in (lo, lo + 1, hi - 1, hi, 0, 1, -1)
                            if lo <= v <= hi}))
    powers = tuple(sorted({s * 2**k + d for k in range(1, 65) for s in (1, -1)
                           for d in (-1, 0, 1) if lo <= s * 2**k + d <= hi}))
    small = (max(lo, -100), min(hi, 100))

    def sample(r: random.Random) -> int:
        how = r.randrange(8)
        if how < 2:
            return r.choice(special)
        if how < 4 and small[0] <= small[1]:
            return r.randint(*small)
        if how < 5 and powers:
            return r.choice(powers)
        return r.randint(lo, hi)
    return Gen(sample, lambda: st.integers(lo, hi))


_FLOAT_SPECIALS = (0.0, -0.0, 0.5, -1.5, 0.1, 1e-300, 5e-324, 2.0**53, 2.0**53 + 2, 2.0**63,
                   2.0**64, -2.0**63, 1.7976931348623157e308, -1.7976931348623157e308)
_NONFINITE = (math.inf, -math.inf, math.nan)


def _random_float(r: random.Random) -> float:
    return struct.unpack("<d", r.randbytes(8))[0]


@lru_cache(maxsize=64)
def floats(lo: float | None = None, hi: float | None = None, finite: bool = False) -> Gen:
    """Floats: any (special values, any bit pattern) or, bounded, finite within the bounds."""
    if lo is None and hi is None:
        pool = _FLOAT_SPECIALS if finite else _FLOAT_SPECIALS + _NONFINITE

        def sample(r: random.Random) -> float:
            how = r.randrange(4)
            if how == 0:
                return r.choice(pool)
            if how == 1:
                return r.uniform(-1000.0, 1000.0)
            v = _random_float(r)
            return v if not finite or math.isfinite(v) else r.uniform(-1.0, 1.0)
        if finite:
            return Gen(sample, lambda: st.floats(allow_nan=False, allow_infinity=False))
        return Gen(sample, st.floats)
    if lo is None or hi is None:  # as float(None) would
        raise TypeError("floats takes both bounds or neither")
    low, high = float(lo), float(hi)
    ends = tuple(v for v in (low, high, 0.0, -0.0, 0.5) if low <= v <= high)

    def bounded(r: random.Random) -> float:
        return r.choice(ends) if r.random() < 0.3 else r.uniform(low, high)
    return Gen(bounded, lambda: st.floats(low, high, allow_nan=False, allow_infinity=False))


@lru_cache(maxsize=64)
def binary(min_size: int, max_size: int) -> Gen:
    return Gen(lambda r: r.randbytes(r.randint(min_size, max_size)),
               lambda: st.binary(min_size=min_size, max_size=max_size))


# Code points for free text: mostly printable ASCII, then controls (NUL included), Latin-1 and
# the rest of the BMP around the surrogates, and the astral planes.
_RANGES = ((0x20, 0x7E, 12), (0x00, 0x1F, 2), (0x7F, 0xFF, 2), (0x100, 0xD7FF, 2),
           (0xE000, 0xFFFF, 1), (0x10000, 0x10FFFF, 1))
_WEIGHTED = tuple((lo, hi) for lo, hi, w in _RANGES for _ in range(w))


def _length(r: random.Random, lo: int, hi: int) -> int:
    """Mostly short (up to 8 past the minimum), one in eight at or next to the maximum."""
    if r.randrange(8) == 0:
        return r.choice((hi, max(lo, hi - 1)))
    return r.randint(lo, min(hi, lo + 8))


@lru_cache(maxsize=256)
def text(max_size: int, min_size: int = 0, alphabet: str | None = None) -> Gen:
    """Strings of ``min_size`` to ``max_size`` characters, of ``alphabet`` if given."""
    if alphabet is not None:
        chars = alphabet

        def sample(r: random.Random) -> str:
            return "".join(r.choices(chars, k=_length(r, min_size, max_size)))
        return Gen(sample, lambda: st.text(alphabet=chars, min_size=min_size,
                                           max_size=max_size))

    def free(r: random.Random) -> str:
        n = _length(r, min_size, max_size)
        if r.random() < 0.5:   # plain ASCII, the common case
            return "".join(chr(r.randint(0x20, 0x7E)) for _ in range(n))
        out = []
        for _ in range(n):
            lo, hi = r.choice(_WEIGHTED)
            out.append(chr(r.randint(lo, hi)))
        return "".join(out)
    return Gen(free, lambda: st.text(min_size=min_size, max_size=max_size))


# -- combinators --------------------------------------------------------------------------------
def one_of(*gens: Gen) -> Gen:
    samplers = tuple(g.sample for g in gens)
    return Gen(lambda r: r.choice(samplers)(r), lambda: st.one_of(*(g.strategy for g in gens)))


def lists(gen: Gen, min_size: int = 0, max_size: int = 4) -> Gen:
    sample = gen.sample
    return Gen(lambda r: [sample(r) for _ in range(r.randint(min_size, max_size))],
               lambda: st.lists(gen.strategy, min_size=min_size, max_size=max_size))


def builds(fn: Callable[..., Any], *gens: Gen) -> Gen:
    samplers = tuple(g.sample for g in gens)
    return Gen(lambda r: fn(*(s(r) for s in samplers)),
               lambda: st.builds(fn, *(g.strategy for g in gens)))


def fixed_dicts(required: Mapping[str, Gen], optional: Mapping[str, Gen]) -> Gen:
    """Maps with every ``required`` key and each ``optional`` key half the time."""
    req = tuple((k, g.sample) for k, g in required.items())
    opt = tuple((k, g.sample) for k, g in optional.items())

    def sample(r: random.Random) -> dict:
        out = {k: s(r) for k, s in req}
        for k, s in opt:
            if r.random() < 0.5:
                out[k] = s(r)
        return out
    return Gen(sample, lambda: st.fixed_dictionaries(
        {k: g.strategy for k, g in required.items()},
        optional={k: g.strategy for k, g in optional.items()}))


def json_values(safe: int, depth: int = 3, top_null: bool = True) -> Gen:
    """Any JSON value (the value of an untyped schema): integers within ``+-safe``, finite
    floats, short strings, lists and string-keyed maps nested up to ``depth`` levels. Without
    ``top_null`` the value itself is never null (a null field breaks BQ-ENV-7 or a MUST)."""
    leaves = (NONE, BOOL, values(-safe, safe), floats(finite=True), text(8))
    key = text(6)

    def value(r: random.Random, level: int, null: bool) -> Any:
        how = r.randrange(7 if level < depth else 5)
        if how == 0 and not null:
            how = 1 + r.randrange(4)
        if how < 5:
            return leaves[how].sample(r)
        if how == 5:
            return [value(r, level + 1, True) for _ in range(r.randint(0, 4))]
        return {key.sample(r): value(r, level + 1, True) for _ in range(r.randint(0, 4))}

    def sample(r: random.Random) -> Any:
        return value(r, 0, top_null)

    def build() -> st.SearchStrategy:
        scalars = st.one_of(st.none(), st.booleans(), st.integers(-safe, safe),
                            st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=8))
        tree = st.recursive(scalars, lambda c: st.lists(c, max_size=4)
                            | st.dictionaries(st.text(max_size=6), c, max_size=4), max_leaves=8)
        return tree if top_null else tree.filter(lambda v: v is not None)
    return Gen(sample, build)
