"""``queuewire spec diff``: the real profiles, a profile against itself, and for each class of
change a copy of spec/ with that one thing edited, checked through the API
(``queuewire.spec.diff``) and the command line (click's runner)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from queuewire.cli import main
from queuewire.cli.spec_diff import tree_at
from queuewire.docs.spec_diff import adjacent_pairs, diff_page
from queuewire.spec import clear_cache, load_profile, profile_names, raw_tree, spec_dir
from queuewire.spec.diff import (
    Change,
    ProtocolMismatch,
    diff_profiles,
    diff_trees,
    raw_form,
)
from queuewire.spec.diff_rules import RULES, rule_for


@pytest.fixture
def run():
    runner = CliRunner()

    def invoke(*args: str):
        return runner.invoke(main, ["spec", "diff", *args], catch_exceptions=False)
    return invoke


def edited(tmp_path: Path, file: str, edit) -> Path:
    """spec/ copied into tmp_path with ``edit`` applied to the data of one of its YAML files."""
    root = tmp_path / "spec"
    shutil.copytree(spec_dir(), root)
    path = root / file
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return root


def changes_in(root: Path, profile: str) -> list[Change]:
    """The changes from ``profile`` of the spec in use to the same profile of ``root``."""
    return diff_trees(raw_form(load_profile(profile)), tree_at(root, profile))


def only(changes: list[Change], **match: str) -> Change:
    """The one change with the given attributes (others may exist, such as citations)."""
    found = [c for c in changes if all(getattr(c, k) == v for k, v in match.items())]
    assert len(found) == 1, (match, changes)
    return found[0]


# -- real profiles ------------------------------------------------------------------------------
def test_bunqueue_v2_to_2_9_5_lists_breaking_changes_and_exits_1(run):
    result = run("bunqueue/v2", "bunqueue/2.9.5", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.output)
    assert doc["protocol"] == "bunqueue" and doc["summary"]["breaking"] > 0
    by_path = {c["path"]: c for c in doc["changes"]}
    added = by_path["commands.SubscribeEvents"]
    assert (added["what"], added["kind"], added["clients"], added["servers"]) == \
        ("command", "added", "compatible", "breaking")
    name = by_path["commands.PUSH.request.properties.name"]
    assert (name["what"], name["trend"], name["clients"], name["servers"]) == \
        ("request field", "optional", "compatible", "compatible")
    version = by_path["limits.protocol_version"]
    assert (version["old"]["value"], version["new"]["value"]) == (2, 3)
    assert version["clients"] == version["servers"] == "breaking"


def test_quicx_v1_to_1_0_3_lists_breaking_changes_and_exits_1(run):
    result = run("quicx/v1", "quicx/1.0.3")
    assert result.exit_code == 1
    assert "Breaking for clients and servers" in result.output
    changes = diff_profiles(load_profile("quicx/v1"), load_profile("quicx/1.0.3"))
    v1, v103 = (load_profile(n).tree["messages"] for n in ("quicx/v1", "quicx/1.0.3"))
    for name in ("MSG_TASK", "MSG_DONE", "MSG_FAILED"):
        change = only(changes, path=f"messages.{name}.code")
        assert (change.what, change.old, change.new) == ("opcode", v1[name]["code"], v103[name]["code"])
        assert change.clients == change.servers == "breaking"
    payload = only(changes, path="limits.max_payload_bytes")
    assert (payload.trend, payload.clients, payload.servers) == ("narrowed", "breaking", "breaking")
    forwarded = only(changes, path="messages.MSG_DONE[directions]")
    assert (forwarded.kind, forwarded.new) == ("added", ["daemon -> producer"])
    assert (forwarded.clients, forwarded.servers) == ("breaking", "compatible")


@pytest.mark.parametrize("name", profile_names())
def test_a_profile_against_itself_is_empty_and_exits_0(run, name):
    assert diff_profiles(load_profile(name), load_profile(name)) == []
    result = run(name, name, "--json")
    assert result.exit_code == 0
    assert json.loads(result.output)["changes"] == []
    text = run(name, name)
    assert (text.exit_code, text.output.strip()) == (0, f"{name} → {name}: no changes")


@pytest.mark.parametrize("name", profile_names())
def test_a_profile_gives_the_same_changes_from_its_model_and_its_files(name):
    assert raw_form(load_profile(name)) == raw_tree(name)
    other = next(n for n in profile_names(load_profile(name).protocol) if n != name)
    assert diff_profiles(load_profile(other), load_profile(name)) == \
        diff_trees(raw_tree(other), raw_tree(name))


def test_every_change_of_the_real_profiles_has_a_rule_of_its_own():
    for old, new in adjacent_pairs():
        unclassified = [c for c in diff_profiles(load_profile(old), load_profile(new))
                        if c.what == "other"]
        assert unclassified == [], (old, new)


def test_every_rule_names_both_parties_and_says_why():
    for key, rule in RULES.items():
        assert {rule.a, rule.b} <= {"breaking", "compatible"}, key
        assert rule.why.format(a="client", b="server").endswith("."), key
        assert rule_for(*key) is rule
    assert rule_for("no such thing", "added", "") is RULES[("other", "*", "")]


def test_profiles_of_two_protocols_are_a_usage_error(run):
    result = run("bunqueue/v2", "quicx/v1")
    assert result.exit_code == 2
    assert "only one protocol's trees compare" in result.output
    assert "Traceback" not in result.output
    with pytest.raises(ProtocolMismatch):
        diff_profiles(load_profile("bunqueue/v2"), load_profile("quicx/v1"))


def test_unknown_profiles_and_trees_are_usage_errors(run, tmp_path):
    for args, words in ((("bunqueue/v9", "bunqueue/v2"), "unknown profile"),
                        ((f"{tmp_path}:bunqueue/v2", "bunqueue/v2"), "no profiles.yaml"),
                        (("no-such-rev:bunqueue/v2", "bunqueue/v2"), "neither a directory nor")):
        result = run(*args)
        assert result.exit_code == 2, args
        assert words in result.output, args


# -- one edit per class -------------------------------------------------------------------------
def test_an_unedited_copy_is_no_change(run, tmp_path):
    root = edited(tmp_path, "profiles.yaml", lambda data: None)
    assert changes_in(root, "bunqueue/v2") == []
    assert run("bunqueue/v2", f"{root}:bunqueue/v2").exit_code == 0


def test_a_new_required_request_field_breaks_old_clients(run, tmp_path):
    def edit(data):
        push = data["commands"]["PUSH"]["request"]
        push["properties"]["region"] = {"type": "string", "description": "A new field."}
        push["required"].append("region")
    root = edited(tmp_path, "bunqueue/commands/core.yaml", edit)
    change = only(changes_in(root, "bunqueue/v2"), what="request field")
    assert (change.kind, change.trend, change.subject) == ("added", "required", "PUSH request region")
    assert (change.clients, change.servers) == ("breaking", "compatible")
    result = run("bunqueue/v2", f"{root}:bunqueue/v2", "--side", "servers")
    assert result.exit_code == 0  # breaking for clients only
    assert run("bunqueue/v2", f"{root}:bunqueue/v2").exit_code == 1


def test_a_field_made_required_breaks_old_clients_and_made_optional_old_servers(tmp_path):
    def edit(data):
        data["commands"]["PUSH"]["request"]["required"] = ["queue", "priority"]
    root = edited(tmp_path, "bunqueue/commands/core.yaml", edit)
    changes = changes_in(root, "bunqueue/v2")
    made = only(changes, what="required", kind="added")
    assert (made.subject, made.clients, made.servers) == ("PUSH request priority", "breaking", "compatible")
    dropped = only(changes, what="required", kind="removed")
    assert (dropped.subject, dropped.clients, dropped.servers) == \
        ("PUSH request data", "compatible", "breaking")


def test_a_removed_request_field_breaks_clients_that_send_it(tmp_path):
    def edit(data):
        del data["commands"]["PUSH"]["request"]["properties"]["lifo"]
    root = edited(tmp_path, "bunqueue/commands/core.yaml", edit)
    change = only(changes_in(root, "bunqueue/v2"), what="request field")
    assert (change.kind, change.trend, change.clients, change.servers) == \
        ("removed", "optional", "breaking", "compatible")
    assert "additionalProperties is open" in change.why


def test_a_closed_schema_makes_a_new_optional_field_break_old_servers():
    old = raw_tree("bunqueue/v2")
    old["commands"]["PUSH"]["request"]["additionalProperties"] = False
    new = json.loads(json.dumps(old))
    new["commands"]["PUSH"]["request"]["properties"]["region"] = {"type": "string"}
    change = only(diff_trees(old, new), what="request field")
    assert (change.trend, change.clients, change.servers) == ("optional closed", "compatible", "breaking")


def _set_tags_max_items(schema):
    schema["properties"]["tags"]["maxItems"] = 10


def _lifo_or_null(schema):
    schema["properties"]["lifo"]["type"] = ["boolean", "null"]


def _priority_to_delay_max(schema):
    schema["properties"]["priority"] = {"type": "integer", "maximum": {"$limit": "delay.max"}}


def _priority_to_limit(schema):
    schema["properties"]["priority"] = {"type": "integer", "maximum": 2000000}


@pytest.mark.parametrize("edit, before, what, trend, clients, servers", [
    (_set_tags_max_items, None, "constraint", "narrowed", "breaking", "compatible"),
    (_lifo_or_null, None, "type", "widened", "compatible", "breaking"),
    # a $limit is compared by its value in each tree: delay.max is above priority.max
    (_priority_to_delay_max, _priority_to_limit, "constraint", "widened", "compatible", "breaking"),
    (_priority_to_limit, _priority_to_delay_max, "constraint", "narrowed", "breaking",
     "compatible"),
])
def test_request_types_and_bounds_widened_or_narrowed(edit, before, what, trend, clients, servers):
    old = raw_tree("bunqueue/v2")
    if before:
        before(old["commands"]["PUSH"]["request"])
    new = json.loads(json.dumps(old))
    edit(new["commands"]["PUSH"]["request"])
    change = only(diff_trees(old, new), what=what)
    assert (change.trend, change.clients, change.servers) == (trend, clients, servers)


def test_a_definition_change_binds_the_senders_of_every_message_that_uses_it():
    old = raw_tree("bunqueue/v2")
    new = json.loads(json.dumps(old))
    new["definitions"]["JobId"]["maxLength"] = 64  # ACK sends job ids, PUSH answers one
    replies = json.loads(json.dumps(old))
    replies["definitions"]["Timestamp"]["minimum"] = 0  # only replies carry a Timestamp
    both = only(diff_trees(old, new), path="definitions.JobId.maxLength")
    assert (both.what, both.trend, both.clients, both.servers) == \
        ("constraint", "narrowed", "breaking", "breaking")
    stamp = only(diff_trees(old, replies), path="definitions.Timestamp.minimum")
    assert (stamp.clients, stamp.servers) == ("compatible", "breaking")


def test_a_new_reply_field_is_compatible_and_exits_0(run, tmp_path):
    def edit(data):
        data["commands"]["PUSH"]["response"]["properties"]["shard"] = {
            "type": "integer", "description": "A new reply field."}
    root = edited(tmp_path, "bunqueue/commands/core.yaml", edit)
    change = only(changes_in(root, "bunqueue/v2"), what="reply field")
    assert (change.kind, change.clients, change.servers) == ("added", "compatible", "compatible")
    result = run("bunqueue/v2", f"{root}:bunqueue/v2")
    assert result.exit_code == 0
    assert "Compatible (1)" in result.output and "PUSH reply shard" in result.output


def test_a_removed_reply_field_breaks_clients(tmp_path):
    def edit(data):
        del data["commands"]["PUSH"]["response"]["properties"]["id"]
        data["commands"]["PUSH"]["response"]["required"] = []
    root = edited(tmp_path, "bunqueue/commands/core.yaml", edit)
    change = only(changes_in(root, "bunqueue/v2"), what="reply field")
    assert (change.kind, change.trend, change.clients, change.servers) == \
        ("removed", "required", "breaking", "compatible")


def test_a_renumbered_opcode_breaks_both(run, tmp_path):
    def edit(data):
        data["messages"]["MSG_READY"]["code"] = 0x0D
    root = edited(tmp_path, "quicx/protocol.yaml", edit)
    changes = changes_in(root, "quicx/v1")
    change = only(changes, what="opcode")
    assert (change.path, change.old, change.new) == ("messages.MSG_READY.code", 4, 13)
    assert change.clients == change.servers == "breaking"
    assert [c for c in changes if c is not change] == []
    result = run("quicx/v1", f"{root}:quicx/v1", "--json", "--side", "clients")
    assert result.exit_code == 1
    assert json.loads(result.output)["summary"]["breaking_for_servers"] == 1


def test_a_new_message_breaks_its_receivers(tmp_path):
    def edit(data):
        data["messages"]["MSG_NOTICE"] = {"code": 0x0D, "from": "daemon", "to": "worker",
                                          "payload": "empty", "doc": "A new message.", "layout": []}
    root = edited(tmp_path, "quicx/protocol.yaml", edit)
    change = only(changes_in(root, "quicx/v1"), what="message")
    assert (change.kind, change.new, change.clients, change.servers) == \
        ("added", 13, "breaking", "compatible")


@pytest.mark.parametrize("new_max, trend, clients, servers", [
    (2000000, "widened", "compatible", "breaking"),
    (500000, "narrowed", "breaking", "compatible"),
])
def test_a_limit_widened_or_narrowed(tmp_path, new_max, trend, clients, servers):
    def edit(data):
        data["limits"]["priority"]["max"] = new_max
    root = edited(tmp_path, "bunqueue/protocol.yaml", edit)
    changes = changes_in(root, "bunqueue/v2")
    assert len(changes) == 1  # once at the limit, not again at each schema that uses it
    change = changes[0]
    assert (change.path, change.what, change.trend) == ("limits.priority", "limit", trend)
    assert (change.old["max"], change.new["max"]) == (1000000, new_max)
    assert (change.clients, change.servers) == (clients, servers)


def test_a_limit_change_through_loaded_profiles_is_one_change(spec_copy):
    before = load_profile("bunqueue/v2")
    path = spec_copy / "bunqueue" / "protocol.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["limits"]["queue_name_length"]["max"] = 128
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    clear_cache()
    changes = diff_profiles(before, load_profile("bunqueue/v2"))
    assert [(c.path, c.trend, c.clients, c.servers) for c in changes] == \
        [("limits.queue_name_length", "narrowed", "breaking", "compatible")]


def test_a_changed_error_string_breaks_both(tmp_path):
    def edit(data):
        data["errors"]["job_not_found"]["message"] = "No such job"
    root = edited(tmp_path, "bunqueue/protocol.yaml", edit)
    change = only(changes_in(root, "bunqueue/v2"), what="error string")
    assert (change.path, change.old, change.new) == ("errors.job_not_found.message", "Job not found",
                                                      "No such job")
    assert change.clients == change.servers == "breaking"


def test_a_removed_command_breaks_clients(run, tmp_path):
    def edit(data):
        del data["commands"]["GetJobByCustomId"]
    root = edited(tmp_path, "bunqueue/commands/query.yaml", edit)
    change = only(changes_in(root, "bunqueue/v2"), what="command")
    assert (change.kind, change.subject, change.clients, change.servers) == \
        ("removed", "GetJobByCustomId", "breaking", "compatible")
    result = run("bunqueue/v2", f"{root}:bunqueue/v2", "--breaking-only", "--json")
    assert result.exit_code == 1
    assert [c["path"] for c in json.loads(result.output)["changes"]] == ["commands.GetJobByCustomId"]


def test_state_table_transitions_added_removed_and_changed(tmp_path):
    def edit(data):
        rows = data["job_lifecycle"]["transitions"]
        rows[:] = [r for r in rows if r["event"] != "RetryDlq"]
        next(r for r in rows if r["event"] == "MoveToDelayed")["to"] = "waiting"
        rows.append({"from": "completed", "event": "Rerun", "to": "waiting",
                     "requirement": "BQ-JOB-8"})
    root = edited(tmp_path, "bunqueue/protocol.yaml", edit)
    changes = changes_in(root, "bunqueue/v2")
    removed = only(changes, what="transition", kind="removed")
    assert (removed.subject, removed.old) == ("job_lifecycle: failed --RetryDlq-->", "waiting")
    assert removed.clients == removed.servers == "breaking"
    changed = only(changes, what="transition", kind="changed")
    assert (changed.old, changed.new) == ("delayed", "waiting")
    assert changed.clients == changed.servers == "breaking"
    added = only(changes, what="transition", kind="added")
    assert (added.new, added.clients, added.servers) == ("waiting", "compatible", "breaking")


def test_a_dialogue_row_whose_replies_change_breaks_both_sides(tmp_path):
    def edit(data):
        row = next(r for r in data["task_dialogue"]["transitions"]
                   if (r["from"], r["event"]) == ("held", "done"))
        row["replies"] = {"producer": ["MSG_DONE"]}
    root = edited(tmp_path, "quicx/protocol.yaml", edit)
    change = only(changes_in(root, "quicx/v1"), what="replies")
    assert (change.subject, change.old, change.new) == (
        "task_dialogue: held --done-->", {}, {"producer": ["MSG_DONE"]})
    assert change.clients == change.servers == "breaking"


@pytest.mark.parametrize("rid, level, trend, clients, servers", [
    ("BQ-JOB-2", "MUST", "raised", "compatible", "breaking"),    # a server SHOULD made a MUST
    ("BQ-JOB-8", "SHOULD", "lowered", "breaking", "compatible"),  # a server MUST made a SHOULD
])
def test_a_requirement_level_raised_or_lowered(tmp_path, rid, level, trend, clients, servers):
    def edit(data):
        data["requirements"][rid]["level"] = level
    root = edited(tmp_path, "bunqueue/requirements/behaviour.yaml", edit)
    change = only(changes_in(root, "bunqueue/v2"), what="requirement")
    assert (change.path, change.new, change.trend) == (f"requirements.{rid}.level", level, trend)
    assert (change.clients, change.servers) == (clients, servers)


def test_a_git_revision_is_read_as_data(run, tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    shutil.copytree(spec_dir(), repo / "spec")

    def git(*args: str) -> None:
        subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo,
                       check=True, capture_output=True)
    git("init", "-q")
    git("add", "spec")
    git("commit", "-q", "-m", "spec")
    path = repo / "spec" / "quicx" / "protocol.yaml"
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    data["error_codes"]["QUEUE_FULL"]["code"] = 0x09
    path.write_text(yaml.safe_dump(data, sort_keys=False), encoding="utf-8")
    git("commit", "-q", "-am", "renumber an error code")
    monkeypatch.chdir(repo)
    same = run("HEAD:quicx/v1", f"{repo / 'spec'}:quicx/v1")
    assert (same.exit_code, "no changes" in same.output) == (0, True)
    result = run("HEAD~1:quicx/v1", "HEAD:quicx/v1", "--json")
    assert result.exit_code == 1
    (change,) = json.loads(result.output)["changes"]
    assert (change["path"], change["old"], change["new"]) == ("error_codes.QUEUE_FULL.code", 1, 9)


# -- docs ---------------------------------------------------------------------------------------
def test_the_docs_page_renders_each_adjacent_pair():
    page = "\n".join(diff_page())
    pairs = adjacent_pairs()
    assert ("bunqueue/v2", "bunqueue/2.9.5") in pairs and ("quicx/v1", "quicx/1.0.3") in pairs
    for old, new in pairs:
        assert f"## {old} → {new}" in page
        changes = diff_profiles(load_profile(old), load_profile(new))
        section = page.split(f"## {old} → {new}", 1)[1].split("\n## ", 1)[0]
        assert f"### Breaking ({sum(c.breaking for c in changes)})" in section
        assert all(f"`{c.subject}`" in section for c in changes if c.breaking)
