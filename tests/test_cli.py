"""The ``queuewire`` command line, run through click's test runner (the real entry point)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from queuewire.cli import main
from queuewire.codecs.bunqueue import encode_frame
from queuewire.codecs.quicx import QuicxEncoder
from queuewire.spec import load_profile, profile_names


@pytest.fixture
def run():
    runner = CliRunner()

    def invoke(*args: str, input: bytes | str | None = None):
        return runner.invoke(main, list(args), input=input, catch_exceptions=False)
    return invoke


def test_help_explains_every_command(run):
    out = run("--help").output
    for word in ("spec", "decode", "vectors"):
        assert word in out
    assert "--profile" in run("decode", "--help").output


def test_spec_list_default_shows_both_protocols(run):
    result = run("spec", "list")
    assert result.exit_code == 0
    assert "bunqueue/v2: 62 commands" in result.output
    assert "quicx/v1: 12 message types" in result.output
    for name in load_profile("bunqueue/v2").model.commands:
        assert f" {name} " in result.output


@pytest.mark.parametrize("profile", ["quicx/v1", "quicx/1.0.3"])
def test_spec_list_quicx_shows_the_profiles_opcodes(run, profile):
    out = run("spec", "list", "--profile", profile).output
    messages = load_profile(profile).tree["messages"]
    assert f"{profile}: 12 message types" in out
    for name in ("MSG_TASK", "MSG_DONE", "MSG_FAILED"):
        line = next(row for row in out.splitlines() if f" {name} " in row)
        assert f"0x{messages[name]['code']:02X}" in line


def test_1_0_3_renumbers_task_done_failed(run):
    def code(out: str, name: str) -> str:
        return next(row for row in out.splitlines() if f" {name} " in row).split("│")[1].strip()
    v1 = run("spec", "list", "--profile", "quicx/v1").output
    v103 = run("spec", "list", "--profile", "quicx/1.0.3").output
    assert (code(v1, "MSG_TASK"), code(v1, "MSG_DONE"), code(v1, "MSG_FAILED")) == \
        ("0x05", "0x06", "0x07")
    assert (code(v103, "MSG_DONE"), code(v103, "MSG_FAILED"), code(v103, "MSG_TASK")) == \
        ("0x05", "0x06", "0x07")


def test_unknown_profile_is_a_usage_error_not_a_traceback(run):
    result = run("spec", "list", "--profile", "nope/1")
    assert result.exit_code == 2
    assert "unknown profile 'nope/1'" in result.output


def test_spec_show(run):
    out = run("spec", "show", "BQ-FRAME-2").output
    assert "MUST" in out and "64 MB" in out
    out = run("spec", "show", "PUSH").output
    assert '"priority"' in out and "BQ-CMD-PUSH" in out
    out = run("spec", "show", "MSG_SUBMIT", "--profile", "quicx/v1").output
    assert "len_type" in out
    result = run("spec", "show", "NoSuchThing")
    assert result.exit_code == 2 and "is not a command" in result.output


def test_spec_lint_is_clean(run):
    result = run("spec", "lint")
    assert result.exit_code == 0, result.output
    assert "clean" in result.output


def test_spec_export_json(run, tmp_path):
    out = tmp_path / "spec.json"
    assert run("spec", "export", "--format", "json", "-o", str(out)).exit_code == 0
    doc = json.loads(out.read_text())
    assert set(doc["profiles"]) == set(profile_names())
    push = doc["profiles"]["bunqueue/v2"]["schemas"]["PUSH"]["request"]
    assert push["$defs"]["Priority"]["maximum"] == load_profile("bunqueue/v2").limits["priority"].max
    assert doc["profiles"]["quicx/1.0.3"]["spec"]["messages"]["MSG_TASK"]["code"] == 7
    assert doc["profiles"]["bunqueue/v3"]["spec"]["limits"]["wait_job_timeout"]["max"] == 600000


def lines(output: str) -> list[dict]:
    return [json.loads(row) for row in output.splitlines() if row.strip()]


def test_decode_bunqueue_reports_verdicts_and_framing_error(run, tmp_path):
    stream = (encode_frame({"cmd": "PUSH", "queue": "q", "data": 1, "priority": 5_000_000})
              + encode_frame({"cmd": "Ping", "reqId": "1"}) + b"\xff\xff\xff\xff")
    path = tmp_path / "capture.bin"
    path.write_bytes(stream)
    result = run("decode", "--protocol", "bunqueue", "--chunk", "3", str(path))
    assert result.exit_code == 1  # a framing error ends the stream
    records = lines(result.output)
    assert records[0]["message"]["cmd"] == "PUSH"
    assert [v["requirement"] for v in records[0]["verdicts"]] == ["BQ-LIMIT-4"]
    assert records[1]["verdicts"] == [] and records[1]["offset"] == len(encode_frame(
        {"cmd": "PUSH", "queue": "q", "data": 1, "priority": 5_000_000}))
    assert records[2]["error"]["requirement"] == "BQ-FRAME-2"


def test_decode_bunqueue_goes_on_after_a_bad_payload(run):
    stream = b"\x00\x00\x00\x01\x01" + encode_frame({"cmd": "Ping"})
    result = run("decode", "--protocol", "bunqueue", "--hex", "-", input=stream.hex())
    assert result.exit_code == 0
    records = lines(result.output)
    assert records[0]["error"]["kind"] == "not_a_map"
    assert records[1]["message"] == {"cmd": "Ping"}


def test_decode_truncated_stream_exits_1(run):
    stream = encode_frame({"cmd": "Ping"})[:-1]
    result = run("decode", "--protocol", "bunqueue", "--hex", "-", input=stream.hex())
    assert result.exit_code == 1
    assert lines(result.output)[-1]["error"]["kind"] == "truncated_frame"


def test_decode_quicx_both_directions(run):
    enc = QuicxEncoder("quicx/v1")
    to_daemon = enc.submit("send_email", b"{}") + enc.encode("MSG_READY")
    result = run("decode", "--protocol", "quicx", "--hex", "-", input=to_daemon.hex())
    assert result.exit_code == 0
    assert [r["type"] for r in lines(result.output)] == ["MSG_SUBMIT", "MSG_READY"]
    result = run("decode", "--protocol", "quicx", "--role", "producer", "--hex", "-",
                 input=enc.ok(7).hex())
    assert lines(result.output)[0]["fields"]["task_id"] == 7


def test_decode_quicx_bad_version_is_reported_with_its_error_code(run):
    result = run("decode", "--protocol", "quicx", "--hex", "-", input="020400000000")
    record = lines(result.output)[0]
    assert record["error"]["kind"] == "bad_version"
    assert record["error"]["error_code"] == 2


def test_decode_input_errors_are_usage_errors(run, tmp_path):
    assert run("decode", "--protocol", "bunqueue", "--hex", "-", input="zz").exit_code == 2
    assert run("decode", "--protocol", "bunqueue", str(tmp_path / "missing")).exit_code == 2
    result = run("decode", "--protocol", "quicx", "--profile", "bunqueue/v2", "-", input=b"")
    assert result.exit_code == 2 and "not quicx" in result.output


def test_vectors_check_passes(run):
    result = run("vectors", "check")
    assert result.exit_code == 0, result.output
    assert "all pass" in result.output
