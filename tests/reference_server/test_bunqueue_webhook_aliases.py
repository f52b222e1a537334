"""AddWebhook's SSRF rule (BQ-WEBHOOK-1) on the names and addresses bunqueue 2.9.5 lets
through (issue 25): a fully-qualified name (a trailing dot) is the name itself, the loopback
names of the usual hosts files are localhost, and an IPv4 address behind NAT64's well-known
prefix is judged as that address. The error names are those of protocol.yaml ``errors``."""

from __future__ import annotations

import pytest

from queuewire.reference_server.bunqueue import BunqueueEngine, EngineConfig
from queuewire.reference_server.bunqueue.webhook_urls import (
    LOOPBACK_NAMES,
    webhook_host_error,
    webhook_url_error,
)
from queuewire.spec import load_profile

MODEL = load_profile("bunqueue/v2").model

REFUSED = [
    # the stated MUST: the fully-qualified spelling of a blocked name
    ("http://localhost./hook", "webhook_url_localhost"),
    ("http://LOCALHOST./hook", "webhook_url_localhost"),
    ("http://api.localhost./hook", "webhook_url_localhost"),
    ("http://metadata.google.internal./computeMetadata/v1/", "webhook_url_metadata"),
    ("http://metadata./computeMetadata/v1/", "webhook_url_metadata"),
    # what a resolver maps to a blocked address (readings, refused all the same)
    ("http://localhost.localdomain/hook", "webhook_url_localhost"),
    ("http://localhost.localdomain./hook", "webhook_url_localhost"),
    ("http://ip6-localhost/hook", "webhook_url_localhost"),
    ("http://localhost6.localdomain6/hook", "webhook_url_localhost"),
    ("http://metadata/computeMetadata/v1/", "webhook_url_metadata"),
    ("http://100.100.100.200/latest/meta-data/", "webhook_url_private"),
    ("http://[64:ff9b::a9fe:a9fe]/latest/meta-data/", "webhook_url_link_local"),
    ("http://[64:ff9b::7f00:1]/", "webhook_url_loopback"),
    ("http://[64:ff9b::a00:5]/", "webhook_url_private"),
    ("http://[64:ff9b:1::a9fe:a9fe]/", "webhook_url_private"),  # local-use NAT64: not global
]


@pytest.mark.parametrize(("url", "error"), REFUSED)
def test_names_a_resolver_maps_to_a_blocked_address_are_refused(url, error):
    assert error in MODEL.errors  # a documented error string of BQ-WEBHOOK-1
    assert MODEL.errors[error].requirement == "BQ-WEBHOOK-1"
    assert webhook_url_error(url) == error


@pytest.mark.parametrize("url", ["http://[64:ff9b::808:808]/hook", "https://localdomain.example/x",
                                 "https://localhost.example.com/x", "https://my-localhost.com/"])
def test_public_look_alikes_are_accepted(url):
    assert webhook_url_error(url) is None


def test_every_loopback_name_is_refused_as_a_host_and_fully_qualified():
    for name in LOOPBACK_NAMES:
        assert webhook_host_error(name) == "webhook_url_localhost"
        assert webhook_host_error(name.upper() + ".") == "webhook_url_localhost"


def test_the_engine_refuses_them_and_registers_nothing():
    engine = BunqueueEngine(config=EngineConfig())
    for url, error in REFUSED:
        reply = engine.handle("c1", {"cmd": "AddWebhook", "url": url, "events": ["job.completed"]})
        assert reply == {"ok": False, "error": MODEL.errors[error].message}, url
    listed = engine.handle("c1", {"cmd": "ListWebhooks"})
    assert listed["ok"] is True and listed["data"]["webhooks"] == []
