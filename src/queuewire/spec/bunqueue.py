"""The bunqueue part of the model: commands with their full request and reply JSON Schemas.

A command in ``spec/bunqueue/commands`` holds only its own fields. ``build`` completes each
schema the same way for every command: the envelope fields are merged in (``cmd`` as a
``const``, ``reqId``; ``ok: true`` and ``reqId`` for replies), and the ``$defs`` the schema
uses, transitively, are attached, so each schema stands alone (draft 2020-12) and can be
compiled once by a fast validator. The error reply is shared by all commands.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._load import SpecError, walk
from .model import (
    STRUCT_FORMATS,
    Profile,
    ProtocolErrorKind,
    StateMachine,
    error_kinds,
    frozen_map,
    state_machine,
)
from .resources import Resources
from .resources import build as build_resources

DIALECT = "https://json-schema.org/draft/2020-12/schema"
DEFS_PREFIX = "#/$defs/"


@dataclass(frozen=True)
class ErrorString:
    name: str
    message: str
    doc: str
    requirement: str | None

    @functools.cached_property
    def pattern(self) -> re.Pattern[str]:
        """The message as a regex (:func:`error_pattern`)."""
        return error_pattern(self.message)


def error_pattern(message: str) -> re.Pattern[str]:
    """A spec error string as a regex: ``{placeholders}`` match anything, the rest verbatim
    (use ``fullmatch``)."""
    parts = re.split(r"\{[A-Za-z_][A-Za-z0-9_]*\}", message)
    return re.compile("(?s)" + ".*".join(re.escape(p) for p in parts))


@dataclass(frozen=True)
class Command:
    name: str
    category: str
    doc: str
    doc_ref: str | None
    requirement: str
    request: Mapping[str, Any] = field(repr=False)   # full JSON Schema of the request
    response: Mapping[str, Any] = field(repr=False)  # full JSON Schema of the success reply
    request_fields: tuple[str, ...] = ()   # documented request fields, envelope included
    required_fields: tuple[str, ...] = ()
    response_fields: tuple[str, ...] = ()
    # request fields that hold a credential (``x-secret``): recordings put stars over them
    secret_fields: tuple[str, ...] = ()
    # a lookup's answer for a missing entity (``not_found.error``, a name of ``errors``):
    # what a client maps to null (BQ-QUERY-202 of bunqueue/v3); None: not a lookup
    not_found: str | None = None


@dataclass(frozen=True)
class BunqueueSpec:
    commands: Mapping[str, Command]
    definitions: Mapping[str, Any]
    errors: Mapping[str, ErrorString]
    protocol_errors: Mapping[str, ProtocolErrorKind]
    error_reply: Mapping[str, Any]
    job_states: Mapping[str, str]
    job_lifecycle: StateMachine
    connection_lifecycle: StateMachine
    auth_session: StateMachine
    max_frame_bytes: int
    len_format: str  # struct format of the length prefix (framing.fields.len_payload)
    max_nesting_depth: int
    int_range: tuple[int, int]  # integers msgpackr writes as integers; others as float64
    safe_integer: int  # largest integer a float64 holds exactly
    undefined_ext: tuple[int, bytes]
    timestamp_ext: int
    defaults: Mapping[str, Any]  # client_defaults and worker_defaults values by name
    protocol_version: int
    capabilities: tuple[str, ...]
    default_port: int
    default_http_port: int
    webhook_events: tuple[str, ...] = ()  # event types AddWebhook may subscribe to
    # The server's own bounds (protocol.yaml safeguards, BQ-SAFE-1): value by name.
    safeguards: Mapping[str, int] = field(default_factory=dict)
    # What the server keeps and how a tool lists and removes it (resources.yaml), or None.
    resources: Resources | None = None
    # Forms a client may not write (msgpack.client_forms): form (int64, uint64, int32,
    # uint32 outside int_range, ext) -> the requirement it breaks. Empty: no such rule.
    client_forms: Mapping[str, str] = field(default_factory=dict)

    def command(self, name: str) -> Command:
        try:
            return self.commands[name]
        except KeyError:
            raise KeyError(f"no bunqueue command {name!r}") from None

    def error(self, kind: str) -> ProtocolErrorKind:
        return self.protocol_errors[kind]


def used_defs(schema: Any, definitions: Mapping[str, Any]) -> dict[str, Any]:
    """The definitions a schema references, transitively."""
    todo, out = [schema], {}
    while todo:
        node = todo.pop()
        for _, value in walk(node):
            if isinstance(value, dict) and isinstance(value.get("$ref"), str):
                ref = value["$ref"]
                if not ref.startswith(DEFS_PREFIX):
                    raise SpecError(f"only local $defs references are supported, got {ref!r}")
                name = ref[len(DEFS_PREFIX):]
                if name not in definitions:
                    raise SpecError(f"unknown definition {name!r}")
                if name not in out:
                    out[name] = definitions[name]
                    todo.append(definitions[name])
    return out


def complete_schema(own: Mapping[str, Any] | None, envelope: Mapping[str, Any], required: list[str],
                    definitions: Mapping[str, Any], title: str) -> dict[str, Any]:
    """A command's own schema plus the envelope properties and the ``$defs`` it needs."""
    own = copy.deepcopy(dict(own or {"type": "object"}))
    props = dict(envelope)
    props.update(own.pop("properties", {}) or {})
    schema: dict[str, Any] = {"$schema": DIALECT, "title": title, "type": "object"}
    schema.update(own)
    schema["properties"] = props
    schema["required"] = list(dict.fromkeys(required + list(own.get("required", []))))
    defs = used_defs(schema, definitions)
    if defs:
        schema["$defs"] = copy.deepcopy(defs)
    return schema


def _len_format(framing: Mapping[str, Any]) -> str:
    """The struct format of the frame's length field, from its declared type."""
    field = next((f for f in framing.get("fields", ()) if str(f.get("id", "")).startswith("len_")),
                 None)
    if field is None or field.get("type") not in STRUCT_FORMATS:
        raise SpecError("framing needs a len_* field of an integer type", path="framing.fields")
    return STRUCT_FORMATS[field["type"]]


def build(profile: Profile) -> BunqueueSpec:
    tree = profile.tree
    env = tree["envelope"]
    definitions = tree.get("definitions") or {}
    commands = {}
    for name, c in (tree.get("commands") or {}).items():
        req_env = copy.deepcopy(env["request"])
        req_env["cmd"] = dict(req_env["cmd"], const=name)
        rep_env = copy.deepcopy(env["reply"])
        rep_env["ok"] = dict(rep_env["ok"], const=True)
        try:
            request = complete_schema(c.get("request"), req_env, ["cmd"], definitions,
                                      f"{name} request")
            response = complete_schema(c.get("response"), rep_env, ["ok"], definitions,
                                       f"{name} reply")
        except SpecError as exc:
            raise SpecError(str(exc), path=f"commands.{name}") from None
        commands[name] = Command(
            name=name, category=c.get("category", ""), doc=c.get("doc", ""),
            doc_ref=c.get("doc-ref"), requirement=c.get("requirement", ""),
            request=frozen_map(request), response=frozen_map(response),
            request_fields=tuple(request["properties"]),
            required_fields=tuple(request["required"]),
            response_fields=tuple(response["properties"]),
            secret_fields=tuple(k for k, v in request["properties"].items()
                                if isinstance(v, Mapping) and v.get("x-secret") is True),
            not_found=(c.get("not_found") or {}).get("error"),
        )
    error_reply = dict(copy.deepcopy(env["error_reply"]), **{"$schema": DIALECT})
    ext = tree["msgpack"]["extensions"]
    numbers = tree["msgpack"]["numbers"]
    defaults = {}
    for group in ("client_defaults", "worker_defaults"):
        for key, item in (tree.get(group) or {}).items():
            if isinstance(item, dict) and "value" in item:
                defaults[key] = item["value"]
    limits = profile.limits
    return BunqueueSpec(
        commands=frozen_map(commands),
        definitions=frozen_map(definitions),
        errors=frozen_map({
            k: ErrorString(name=k, message=v["message"], doc=v.get("doc", ""),
                           requirement=v.get("requirement"))
            for k, v in (tree.get("errors") or {}).items()
        }),
        protocol_errors=error_kinds(tree.get("protocol_errors")),
        error_reply=frozen_map(error_reply),
        job_states=frozen_map({k: v.get("doc", "") for k, v in (tree.get("job_states") or {}).items()}),
        job_lifecycle=state_machine("job_lifecycle", tree.get("job_lifecycle") or {}),
        connection_lifecycle=state_machine("connection_lifecycle", tree.get("connection_lifecycle") or {}),
        auth_session=state_machine("auth_session", tree.get("auth_session") or {}),
        max_frame_bytes=int(limits["max_frame_bytes"].value),
        len_format=_len_format(tree["framing"]),
        max_nesting_depth=int(limits["max_nesting_depth"].value),
        int_range=(int(numbers["int_min"]), int(numbers["uint_max"])),
        safe_integer=int(numbers["safe_integer"]),
        client_forms=frozen_map({form: rule["requirement"]
                                 for rule in ((tree["msgpack"].get("client_forms") or {}).get("rules")
                                              or {}).values()
                                 for form in rule["forms"]}),
        undefined_ext=(int(ext["undefined"]["type"]), bytes.fromhex(ext["undefined"]["data_hex"])),
        timestamp_ext=int(ext["timestamp"]["type"]),
        defaults=frozen_map(defaults),
        protocol_version=int(limits["protocol_version"].value),
        capabilities=tuple(tree.get("capabilities") or ()),
        default_port=int(tree.get("default_port", 0)),
        default_http_port=int(tree.get("default_http_port", 0)),
        webhook_events=tuple((tree.get("webhook_events") or {}).get("events") or ()),
        safeguards=frozen_map({k: v["value"] for k, v in (tree.get("safeguards") or {}).items()
                               if isinstance(v, dict) and "value" in v}),
        resources=build_resources(tree.get("resources")),
    )
