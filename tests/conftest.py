"""Shared fixtures for the bunqueue tests: the loaded profile, a validator and a builder of
minimal valid messages. Everything comes from the spec; nothing here restates a field."""

from __future__ import annotations

import pytest

from queuewire.codecs.validation import BunqueueValidator
from queuewire.spec import load_profile
from queuewire.spec.instances import minimal

BUNQUEUE = "bunqueue/v2"


@pytest.fixture(scope="session")
def bq_profile():
    return load_profile(BUNQUEUE)


@pytest.fixture(scope="session")
def bq_validator(bq_profile):
    return BunqueueValidator(bq_profile)


@pytest.fixture(scope="session")
def bq_minimal(bq_profile):
    """``bq_minimal(cmd, reply=False)``: a minimal valid request (or success reply) of ``cmd``."""
    commands = bq_profile.model.commands

    def build(cmd: str, reply: bool = False) -> dict:
        schema = commands[cmd].response if reply else commands[cmd].request
        return minimal(dict(schema))

    return build
