"""The ``resources`` section (spec/bunqueue/resources.yaml): loaded into the bunqueue model,
refused when malformed, and checked by ``spec lint`` against the profile's commands.

Lint tests copy spec/ to a temporary directory, break one thing and check that lint names it
(the pattern of test_lint.py); the model tests read the shipped spec.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from queuewire.spec import SpecError, load_profile, profile_names
from queuewire.spec.lint import lint
from queuewire.spec.resources import build, problems


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in {path}"
    path.write_text(text.replace(old, new, 1))


def test_every_bunqueue_profile_lists_its_resources_and_quicx_none():
    for name in profile_names("bunqueue"):
        res = load_profile(name).model.resources
        assert res is not None, name
        # server-wide kinds, then the kinds held in a queue, in the file's (removal) order
        assert [k.name for k in res.top()] == ["webhooks", "crons", "workers", "queues"]
        assert [k.name for k in res.inside("queues")] == ["dlq", "jobs"]
        webhooks = res.kinds["webhooks"]
        assert (webhooks.list_cmd, webhooks.items, webhooks.key) == \
            ("ListWebhooks", "data.webhooks", "id")
        assert (webhooks.remove_cmd, webhooks.remove_key) == ("RemoveWebhook", "webhookId")
        assert res.kinds["jobs"].counted and res.kinds["jobs"].parent == "queue"
        assert res.kinds["dlq"].remove_cmd is None  # goes with its queue
        assert "Prometheus" in res.probes and all(res.probes.values())
        assert list(problems(res, load_profile(name).model.commands)) == []
    for name in profile_names("quicx"):
        assert getattr(load_profile(name).model, "resources", None) is None


@pytest.mark.parametrize("entry, message", [
    ({"doc": "d"}, "needs list:"),
    ({"doc": "d", "list": {"cmd": "ListQueues"}}, "exactly one of items"),
    ({"doc": "d", "list": {"cmd": "ListQueues", "items": "queues"}}, "needs the key field"),
    ({"doc": "d", "list": {"cmd": "ListQueues", "items": "queues", "key": "name"},
      "remove": {"cmd": "Obliterate"}}, "needs both cmd and key"),
    ({"doc": "d", "list": {"cmd": "Dlq", "items": "jobs", "key": "id"}, "within": "queues"},
     "within: and list.parent go together"),
])
def test_a_malformed_kind_is_refused_naming_its_path(entry, message):
    with pytest.raises(SpecError) as exc:
        build({"doc": "x", "lists": {"broken": entry}})
    assert exc.value.path == "resources.lists.broken" and message in exc.value.message


def test_a_kind_within_an_unknown_or_nested_kind_is_refused():
    inner = {"doc": "d", "within": "nowhere",
             "list": {"cmd": "Dlq", "parent": "queue", "items": "jobs", "key": "id"}}
    with pytest.raises(SpecError, match="is not a listed kind of its own"):
        build({"doc": "x", "lists": {"dlq": inner}})
    with pytest.raises(SpecError, match="goes with its parent item"):
        build({"doc": "x", "lists": {"dlq": dict(inner, within="queues",
                                                 remove={"cmd": "PurgeDlq", "key": "queue"})}})


def test_problems_name_what_the_profile_does_not_have():
    commands = load_profile("bunqueue/v2").model.commands
    res = build({"doc": "x", "lists": {
        "ghosts": {"doc": "d", "list": {"cmd": "ListGhosts", "items": "g", "key": "id"}},
        "webhooks": {"doc": "d", "list": {"cmd": "ListWebhooks", "items": "data.hooks", "key": "id"},
                     "remove": {"cmd": "RemoveWebhook", "key": "hookId"}},
        "crons": {"doc": "d", "list": {"cmd": "CronList", "items": "crons", "key": "title"},
                  "show": ["colour"]},
        "jobs": {"doc": "d", "list": {"cmd": "GetJob", "items": "job", "key": "id"}},
    }, "probes": {"PUSH": {"doc": "needs fields"}, "Nope": {"doc": "unknown"}}})
    found = dict(problems(res, commands))
    assert len(list(problems(res, commands))) >= 6
    said = " | ".join(f"{k}: {v}" for k, v in problems(res, commands))
    assert "list command ListGhosts is not a command of the profile" in said
    assert "the ListWebhooks reply schema has no data.hooks" in said
    assert "RemoveWebhook has no request field hookId" in said
    assert "CronList crons items have no field title" in said
    assert "GetJob needs fields the inventory does not send" in said
    assert "probe PUSH needs request fields" in said and "probe Nope is not a command" in said
    assert "resources.probes.Nope" in found


def test_lint_names_a_resource_command_the_profile_lacks(spec_copy):
    edit(spec_copy / "bunqueue/resources.yaml", "{cmd: CronDelete, key: name}",
         "{cmd: CronRemove, key: name}")
    said = [str(i) for i in lint(["bunqueue/v2"])]
    assert "bunqueue/v2: resources.lists.crons: remove command CronRemove is not a command " \
           "of the profile" in said


def test_lint_names_a_kind_without_a_doc_line(spec_copy):
    edit(spec_copy / "bunqueue/resources.yaml",
         "      doc: Registered workers (RegisterWorker); server-wide.\n", "")
    assert "bunqueue/v2: resources.lists.workers: no doc line" in [str(i) for i in lint(["bunqueue/v2"])]


def test_lint_reports_a_malformed_section_instead_of_raising(spec_copy):
    edit(spec_copy / "bunqueue/resources.yaml", "list: {cmd: ListQueues, items: queues, key: name}",
         "list: {cmd: ListQueues, items: queues}")
    said = [str(i) for i in lint(["bunqueue/v2"])]
    assert any("resources.lists.queues" in m and "needs the key field" in m for m in said), said
