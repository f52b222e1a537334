"""``queuewire trace analyze``: inputs in, Parquet tables, ``summary.json`` and an HTML page out.

:func:`analyze` finds the trace files of the inputs (files, or directories searched for the
format's file glob), reads every file's meta to settle the protocol and profile, then the profile
(:func:`settle_profile`): the given ``--profile``; else the one the traffic shows
(:func:`detect_files`: the frames of the files, in name order, read by
:class:`~queuewire.traffic.detect.Detector` until the server's frames decide or
:data:`DETECT_BYTES` bytes of frames were read); else the one the recording was made under;
else the protocol's default. A set of files that mixes protocols, or profiles when neither
``--profile`` nor the traffic decides, is refused, and so is a meta that breaks the
format's rules, names a protocol or profile this queuewire does not know, or numbers its
file past what the tables hold: each a :class:`TraceError` before any engine starts. The
choice, with its evidence, is the summary's ``profile_choice``),
runs an engine (``spark``, the default, or ``local``; both decode with
:class:`~.decode.FileDecoder`, which refuses a record that breaks the rules) and writes, under
``out``: ``frames/``, ``pairs/``, ``violations/`` and ``conns/`` (Parquet), ``summary.json``
(:mod:`.summary`) and ``summary.html`` (:mod:`.html`). The output directory must be empty or
absent, so an analysis never mixes with an older one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..spec import Profile, default_profile, load_profile
from ..traffic.analyzer import DEFAULT_HOLD_BYTES, PROTOCOLS
from ..traffic.detect import Detector, ProfileChoice
from ..traffic.trace_format import TraceError, parse_header, read_header, scan, trace_format
from .decode import file_identity, profile_named
from .summary import build_summary

ENGINES = ("spark", "local")
#: Bytes of frames the detection reads, at most, before it chooses without a decision.
DETECT_BYTES = DEFAULT_HOLD_BYTES


def find_inputs(inputs: list[str | Path]) -> list[Path]:
    """The trace files of ``inputs``, sorted by name (each connection's files in order)."""
    glob = trace_format().file_glob
    files: list[Path] = []
    for raw in inputs:
        p = Path(raw)
        if p.is_dir():
            found = sorted(p.rglob(glob))
            if not found:
                raise TraceError(f"{p}: no trace files ({glob}) in this directory")
            files.extend(found)
        elif p.is_file():
            files.append(p)
        else:
            raise TraceError(f"{p}: no such file or directory")
    seen: set[Path] = set()
    unique = []
    for f in files:
        r = f.resolve()
        if r not in seen:
            seen.add(r)
            unique.append(f)
    return sorted(unique, key=lambda f: (f.name, str(f)))


def detect_files(files: list[Path], protocol: str, *, limit: int = DETECT_BYTES
                 ) -> tuple[ProfileChoice, bool]:
    """The profile the frames of ``files`` show, read in order until the server's frames
    decide or ``limit`` bytes of frames were read; (the choice, whether it was detected)."""
    fmt = trace_format()
    at = fmt.at
    i_type, i_dir, i_conn = at["record_type"], at["direction"], at["conn_id"]
    frame_code, close_code = fmt.record_types["frame"], fmt.record_types["close"]
    directions = {code: name for name, code in fmt.directions.items()}
    det = Detector(protocol)
    for f in files:
        data = f.read_bytes()
        meta, pos = parse_header(data, fmt)
        run = str(meta.get("run", ""))
        for values, payload in scan(data, pos, fmt):
            code = values[i_type]
            if code == frame_code:
                direction = directions.get(values[i_dir])
                if direction in ("c2s", "s2c"):
                    det.frame((run, values[i_conn]), direction, bytes(payload))
            elif code == close_code:
                det.closed((run, values[i_conn]))
            if det.decided:
                return det.choice(), True
            if det.bytes >= limit:
                choice = det.choice(limited=f"in the first {det.bytes:,} bytes of frames")
                return choice, choice.how == "detected"
    choice = det.choice()
    return choice, choice.how == "detected"


def settle_profile(files: list[Path], protocol: str | None, profile: str | None
                   ) -> tuple[Profile, ProfileChoice]:
    """The profile the files are judged under and how it was chosen (see the module
    docstring)."""
    protocols: set[str] = set()
    profiles: set[str] = set()
    fmt = trace_format()
    for f in files:
        with open(f, "rb") as fh:
            try:
                meta = read_header(fh, fmt)
            except TraceError as exc:
                raise TraceError(f"{f}: {exc}") from None
        file_identity(meta, str(f))
        name = meta.get("protocol")
        if name is None and not profile:
            raise TraceError(f"{f}: the meta names no protocol; judge the file under a "
                             "profile given with --profile")
        if name is not None and name not in PROTOCOLS:
            raise TraceError(f"{f}: unknown protocol {name!r} (known: {', '.join(PROTOCOLS)})")
        if name is not None:
            protocols.add(name)
        if meta.get("profile"):
            profiles.add(meta["profile"])
            if not profile:   # judged under its own profile: one this queuewire knows
                profile_named(meta["profile"], str(f))
    if profile:
        prof = profile_named(profile, "--profile")
        choice = ProfileChoice.given(prof.name)
    else:
        if len(protocols) > 1:
            raise TraceError(f"the inputs mix protocols ({', '.join(sorted(protocols))}): "
                             "analyse each protocol's recordings on their own")
        name = protocol or next(iter(protocols))
        if name not in PROTOCOLS:
            raise TraceError(f"unknown protocol {name!r} (known: {', '.join(PROTOCOLS)})")
        choice, detected = detect_files(files, name)
        recorded = f"the recordings name {', '.join(sorted(profiles))}" if profiles else ""
        if detected:
            if profiles and profiles != {choice.profile}:
                choice = ProfileChoice(choice.profile, choice.how,
                                       (*choice.evidence, f"but {recorded}"))
        elif len(profiles) > 1:
            raise TraceError(f"the inputs were recorded under several profiles "
                             f"({', '.join(sorted(profiles))}) and their traffic does not "
                             "tell which: choose one with --profile")
        elif profiles:   # known: checked file by file above
            note = f"{recorded}; {choice.note}" if choice.note else recorded
            choice = ProfileChoice(profiles.pop(), "recorded", choice.evidence, note)
        else:
            choice = ProfileChoice(default_profile(name), "default", choice.evidence,
                                   choice.note)
        prof = load_profile(choice.profile)
    if protocol and prof.protocol != protocol:
        raise TraceError(f"profile {prof.name} is not a {protocol} profile")
    other = protocols - {prof.protocol}
    if other:
        raise TraceError(f"the inputs hold {', '.join(sorted(other))} recordings, the profile "
                         f"{prof.name} is {prof.protocol}")
    return prof, choice


def analyze(inputs: list[str | Path], out: str | Path, *, engine: str = "spark",
            master: str | None = None, protocol: str | None = None, profile: str | None = None,
            html: bool = True, progress: Callable[[str], None] | None = None,
            spark_conf: dict[str, str] | None = None) -> dict[str, Any]:
    """Run an analysis; returns the summary (also written to ``out/summary.json``)."""
    if engine not in ENGINES:
        raise ValueError(f"unknown engine {engine!r} (known: {', '.join(ENGINES)})")
    say = progress or (lambda _msg: None)
    started = time.perf_counter()
    files = find_inputs(inputs)
    prof, choice = settle_profile(files, protocol, profile)
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise TraceError(f"{out}: the output directory exists and is not empty")
    out.mkdir(parents=True, exist_ok=True)
    size = sum(f.stat().st_size for f in files)
    say(f"{len(files)} trace file(s), {size / 1e6:.1f} MB, judged under {choice.line}; "
        f"engine {engine}" + (f" ({master or 'local[*]'})" if engine == "spark" else ""))
    if engine == "local":
        from . import local
        aggs, unanswered = local.run(files, out, protocol=prof.protocol, profile=prof,
                                     force_profile=prof.name, progress=say)
        used_master = None
    else:
        from . import spark
        aggs, unanswered, used_master = spark.run(
            files, out, protocol=prof.protocol, profile=prof, force_profile=prof.name,
            master=master, progress=say, conf=spark_conf)
    summary = build_summary(aggs, profile=prof, engine=engine, master=used_master,
                            inputs=[str(i) for i in inputs], files=len(files),
                            unanswered=unanswered, elapsed_s=time.perf_counter() - started)
    summary["profile_choice"] = choice.as_dict()
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    if html:
        from .html import write_html
        write_html(summary, out / "summary.html")
    return summary
