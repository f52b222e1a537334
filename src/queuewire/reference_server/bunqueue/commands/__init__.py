"""The bunqueue commands, as plain functions registered by name.

Rules
-----
* One module per command file of ``spec/bunqueue/commands/`` (core, query, control, dlq,
  cron, logs, monitoring, workers, webhooks, rate, auth; ``events`` holds the bunqueue/2.9.5
  overlay's SubscribeEvents and UnsubscribeEvents).
* Each command is a plain function ``fn(engine, conn_id, request, now)`` registered with
  :func:`~.registry.command` under its spec name in :data:`~.registry.COMMANDS`; the engine
  binds the commands of its profile to them when it is built, and a command the profile lists
  without a handler is an error then.
* A handler changes job state only through the engine's job lifecycle (:mod:`..lifecycle`:
  create, take, move, complete, fail, remove) and refuses with ``Refused(<error name>)``,
  which the engine turns into the profile's error string. It reads the engine's tables
  (queues, jobs, crons, workers, webhooks) directly: the commands are the engine's own code,
  split by command file, not a layer above it.

Seams
-----
:data:`COMMANDS` (name -> handler) is what the engine reads; importing this package fills it.
Helpers more than one command file uses are public functions of their home module
(:func:`.query.lookup_job`, :func:`.control.set_queue`, :func:`.cron.load_crons`,
:func:`.monitoring.prometheus_text`).
"""

from __future__ import annotations

# importing each module registers its commands
from . import auth, control, core, cron, dlq, events, logs, monitoring, query, rate, webhooks, workers
from .registry import COMMANDS, command

__all__ = ["COMMANDS", "auth", "command", "control", "core", "cron", "dlq", "events", "logs",
           "monitoring", "query", "rate", "webhooks", "workers"]
