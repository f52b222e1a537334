"""``fuzz --diff`` classes (issue 24, item 3): a reqId null on one side and absent or
undefined on the other is its own class; the rest by what differs."""

from __future__ import annotations

from queuewire.codecs.bunqueue import UNDEFINED
from queuewire.fuzz.diffing import COUNT, NULL_VS_ABSENT, OK_VS_ERROR, OTHER, classify, describe
from queuewire.fuzz.runner import reqid_label


def test_reqid_labels_tell_absent_null_and_undefined_apart():
    assert [reqid_label(r) for r in ({}, {"reqId": None}, {"reqId": UNDEFINED}, {"reqId": "1"},
                                     {"reqId": 2.0}, {"reqId": True})] == [
        "absent", "null", "undefined", "'1'", "('num', 2)", "('const', True)"]


def test_null_versus_absent_is_its_own_class():
    mine, theirs = [("absent", False, True)], [("undefined", False, True)]
    assert classify(mine, theirs) == (NULL_VS_ABSENT,
                                      "reqId absent error vs reqId undefined error")


def test_other_classes():
    assert classify([("'1'", True, False)], [])[0] == COUNT
    assert classify([("'1'", True, False)], [])[1].startswith("1 vs 0 replies")
    assert classify([("'1'", True, False)], [("'1'", False, True)]) == (
        OK_VS_ERROR, "reqId '1' ok vs reqId '1' error")
    assert classify([("'1'", True, False)], [("'2'", True, False)])[0] == OTHER
    # an absent reqId that is also an error on the other side is not only null vs absent
    assert classify([("absent", True, False)], [("null", False, True)])[0] == OK_VS_ERROR


def test_describe_reads_every_kind():
    assert describe(("'1'", True, False)) == "reqId '1' ok"
    assert describe((1, "absent", "absent", True)) == "conn 1 reqId absent error"
    assert describe(("'1'", "absent", False)) == "reqId '1' ok=absent"
    assert describe(("MSG_ERROR", 3)) == "MSG_ERROR (error code 3)"
    assert describe(("MSG_OK", None)) == "MSG_OK"
