"""The quicx spec as data: both profiles load, every requirement is well formed and cited,
every quote is an exact excerpt of its document, references resolve, opcodes are unique,
layouts compile to Structs of the sizes the limits state, the behaviour flags agree with the
message table, and the v1 tables match the text of documents 004 and the 1.0.3 notes."""

from __future__ import annotations

import functools
import re
from pathlib import Path

import pytest
from construct import Container

from queuewire.spec import LEVELS, load_profile, profile_names, sources
from queuewire.spec._load import walk
from queuewire.spec.quicx import DAEMON, QuicxSpec

ROOT = Path(__file__).resolve().parents[2]
SHARED = ROOT.parent / "shared"
PROFILES = profile_names("quicx")
BASE, OVERLAY = "quicx/v1", "quicx/1.0.3"
SUBJECTS = {"daemon", "producer", "worker", "monitor", "peer"}
ID_RE = re.compile(r"^QX-[A-Z0-9]+-\d+$")
needs_shared = pytest.mark.skipif(
    not (SHARED / "seeds").is_dir(),
    reason=f"source documents not present at {SHARED} (../shared beside the repo)")


def fold(text: str) -> str:
    return " ".join(text.split())


@functools.cache
def source_text(doc: str) -> str:
    return fold((SHARED / sources()[doc].file).read_text(encoding="utf-8"))


@pytest.fixture(scope="module", params=PROFILES)
def profile(request):
    return load_profile(request.param)


def test_both_profiles_exist():
    assert {BASE, OVERLAY} <= set(PROFILES)


def test_profile_loads_to_a_quicx_model(profile):
    assert isinstance(profile.model, QuicxSpec)
    assert profile.protocol == "quicx"
    assert "QuicxSpec(" in repr(profile.model)


def test_opcodes_unique_and_fit_the_header(profile):
    spec = profile.model
    codes = [m.code for m in spec.messages.values()]
    assert len(codes) == len(set(codes))
    assert set(spec.by_code) == set(codes)
    width = {f.id: f for f in spec.header}["msg_type"].max_value
    assert all(0 < c <= width for c in codes)


def test_error_codes_unique(profile):
    codes = [e.code for e in profile.model.error_codes.values()]
    assert len(codes) == len(set(codes))


def test_requirements_are_well_formed(profile):
    srcs = sources()
    assert profile.requirements
    for rid, req in profile.requirements.items():
        assert ID_RE.match(rid), rid
        assert req.level in LEVELS, rid
        assert req.subject in SUBJECTS, rid
        assert req.text.strip(), rid
        assert req.source in srcs, rid
        assert req.section in srcs[req.source].sections, (rid, req.section)
        if req.source == "QW":
            assert req.rationale, f"{rid}: a queuewire decision needs a rationale"
        else:
            assert req.quote, f"{rid}: uncited requirement"


@needs_shared
def test_every_quote_is_an_excerpt_of_its_source(profile):
    missing = [
        (rid, req.quote) for rid, req in profile.requirements.items()
        if req.quote and fold(req.quote) not in source_text(req.source)
    ]
    assert not missing


def test_every_requirement_reference_resolves(profile):
    srcs = sources()
    for path, node in walk(profile.tree):
        if not isinstance(node, dict):
            continue
        rid = node.get("requirement")
        if rid is not None and path[:1] != ("requirements",):
            assert rid in profile.requirements, ("/".join(map(str, path)), rid)
        ref = node.get("doc-ref")
        if ref is not None:
            doc, _, section = ref.partition("#")
            assert doc in srcs and section in srcs[doc].sections, ref


def test_every_spec_node_has_a_doc(profile):
    spec, tree = profile.model, profile.tree
    assert spec.doc and all(spec.roles.values())
    for f in spec.header:
        assert f.doc, f.id
    for m in spec.messages.values():
        assert m.doc and m.requirement, m.name
        for f in m.layout:
            assert f.doc and f.requirement, (m.name, f.id)
    for table in ("limits", "error_codes", "protocol_errors", "semantics"):
        for name, item in tree[table].items():
            assert item.get("doc"), (table, name)
            assert item.get("requirement"), (table, name)


def test_protocol_errors_reply_with_a_code(profile):
    spec = profile.model
    for kind, k in spec.protocol_errors.items():
        code = spec.error_replies[kind]
        assert (code is not None) == (k.reaction == "reply"), kind
        if code is not None:
            assert code in spec.error_names, kind


def test_header_and_layouts_compile_to_the_stated_sizes(profile):
    spec, limits = profile.model, profile.limits
    assert spec.header_size == limits["header_bytes"].value
    assert spec.header_struct.sizeof() == spec.header_size
    for m in spec.messages.values():
        if m.fixed_size is not None:
            assert m.struct.sizeof() == m.fixed_size, m.name
        assert (m.payload == "empty") == (not m.layout), m.name
        for f in m.layout:
            if isinstance(f.size, str):  # a len_* field bounds the field it sizes
                length = next(x for x in m.layout if x.id == f.size)
                assert f.size.startswith("len_")
                assert f.max_bytes is None or f.max_bytes <= length.max_value
    if "stats_response_bytes" in limits:
        assert spec.message("MSG_STATS_RESPONSE").fixed_size == limits["stats_response_bytes"].value


def test_task_type_limit_is_the_u1_maximum(profile):
    spec = profile.model
    submit = spec.message("MSG_SUBMIT")
    len_type = next(f for f in submit.layout if f.id == "len_type")
    assert profile.limits["task_type_bytes"].max == len_type.max_value


def test_structs_are_compiled_from_the_layouts(profile):
    spec = profile.model
    for m in spec.messages.values():
        assert [sc.name for sc in m.struct.subcons] == [f.id for f in m.layout]
    submit = spec.message("MSG_SUBMIT")
    data = submit.struct.build({"task_type": "é", "payload": b"x"})
    assert data[0] == len("é".encode()) and data.endswith(b"x")
    assert isinstance(submit.struct.parse(data), Container)


def test_semantics_agree_with_the_message_table(profile):
    spec = profile.model
    flag = spec.flag
    hb, pong = spec.message("MSG_HEARTBEAT"), spec.message("MSG_PONG")
    ok, err = spec.message("MSG_OK"), spec.message("MSG_ERROR")
    assert set(flag("heartbeat_from")) == hb.senders
    assert flag("accepts_inbound_pong") == pong.allows(receiver=DAEMON)
    assert flag("accepts_inbound_ok_error") == (ok.allows(receiver=DAEMON) or err.allows(receiver=DAEMON))
    closes = spec.error(err.errors.get("direction", "wrong_direction")).reaction == "close"
    assert flag("inbound_error_closes") == closes
    assert flag("stats_on_tcp") == (spec.message("MSG_STATS").transport == spec.transport)
    assert flag("wait_when_empty") == spec.allowed("MSG_WAIT")
    assert flag("forward_results_to_producer") == spec.message("MSG_DONE").allows(DAEMON, "producer")
    assert flag("requeue_on_worker_disconnect") is True
    assert flag("client_error_reaction") in {"close", "reply"}


def test_overlay_retires_and_adds_requirements():
    base, over = load_profile(BASE), load_profile(OVERLAY)
    retired = set(base.requirements) - set(over.requirements)
    added = set(over.requirements) - set(base.requirements)
    assert retired and added
    for rid in added:  # replacements get fresh ids, so an id never changes meaning
        assert int(rid.rsplit("-", 1)[1]) >= 101, rid
    for rid in set(base.requirements) & set(over.requirements):
        assert base.requirements[rid] == over.requirements[rid], rid
    assert {over.requirements[r].source for r in added} <= {"N1", "QW"}


def test_profile_differences_are_the_notes_rows():
    v1, v103 = load_profile(BASE).model, load_profile(OVERLAY).model
    moved = {n for n in v1.messages if v1.message(n).code != v103.message(n).code}
    assert moved == {"MSG_TASK", "MSG_DONE", "MSG_FAILED"}
    assert {v1.message(n).code for n in moved} == {v103.message(n).code for n in moved}
    assert v1.message("MSG_DONE").code == v103.message("MSG_FAILED").code
    assert not v1.message("MSG_WAIT").reserved and v103.message("MSG_WAIT").reserved
    assert v103.message("MSG_WAIT").code == v1.message("MSG_WAIT").code  # reserved, not reused
    assert v103.max_payload_bytes < v1.max_payload_bytes
    assert v1.version == v103.version and v1.accepted_versions == v103.accepted_versions
    def reason(s):
        return next(f for f in s.message("MSG_FAILED").layout if f.id == "reason")
    assert reason(v1).max_bytes is None and reason(v103).max_bytes is not None
    assert v103.error_replies["reserved_type"] == v103.error_code("UNKNOWN_TASK_TYPE")


@needs_shared
def test_v1_message_table_matches_document_004():
    spec = load_profile(BASE).model
    rows = re.findall(r"(0x[0-9A-F]{2}) \| (MSG_\w+) \| ([^|]+?) \|", source_text("004"))
    assert len(rows) == len(spec.messages)
    for code, name, direction in rows:
        msg = spec.message(name)
        assert msg.code == int(code, 16), name
        if direction == "either direction":
            assert msg.senders == set(spec.roles) and msg.receivers == set(spec.roles)
        else:
            sender, receiver = (x.strip() for x in direction.split("→"))
            assert msg.allows(sender, receiver), name


@needs_shared
def test_overlay_opcodes_match_the_notes():
    spec = load_profile(OVERLAY).model
    rows = re.findall(r"\| opcode (0x[0-9A-F]{2}) \| [^|]+ \| (MSG_\w+) ", source_text("N1"))
    assert len(rows) == 3
    for code, name in rows:
        assert spec.message(name).code == int(code, 16), name
