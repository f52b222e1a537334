"""The bunqueue commands, one module per command file of ``spec/bunqueue/commands/`` (core,
query, control, dlq, cron, logs, monitoring, workers, webhooks, rate, auth; ``events`` holds
the bunqueue/2.9.5 overlay's SubscribeEvents and UnsubscribeEvents). Each module is a mixin
class of ``_cmd_<Name>(conn_id, request, now)`` handlers that the engine is composed of: the
engine finds a command's handler by its spec name, so a command the profile lists without a
handler here is an error when the engine is built. Handlers read and change state only through
the engine's lifecycle methods (:mod:`..lifecycle`) and refuse with ``Refused(<error name>)``,
which the engine turns into the profile's error string.
"""
