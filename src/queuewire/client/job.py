"""Jobs as the SDK hands them out, and how a job's name and options go on the wire.

A job's name travels as a top-level ``name`` where the profile's PUSH has that field
(bunqueue/2.9.5, BQ-NAME-101); elsewhere (bunqueue/v2, whose PUSH has no name) it travels
inside a map ``data`` as ``data.name``, the envelope older bunqueue clients used and
bunqueue reads back (BQ-NAME-102), and :meth:`Job.from_wire` takes it out again, so the
caller's data comes back as given. Data that is not a map cannot carry a name under such a
profile; the job is then named ``default``, as the server names it. Options are given in
snake_case and written as the command's camelCase fields (``attempts`` is ``maxAttempts``, and
``job_id`` is PUSH's ``jobId`` and PUSHB's ``customId``); an option the command's schema does
not have is a :class:`~.options.ClientConfigError` naming the ones it has.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..spec import Profile
from .options import ClientConfigError, camel, snake

__all__ = ["DEFAULT_NAME", "Job", "JobCodec"]

#: the name bunqueue gives a job that has none (spec job.yaml, Job.name)
DEFAULT_NAME = "default"

#: option names that are not the snake_case of their wire field
_ALIASES = {"attempts": "maxAttempts"}


class JobCodec:
    """A profile's way of writing jobs (PUSH and PUSHB entries) and reading them back."""

    def __init__(self, profile: Profile):
        model = profile.model
        self.profile = profile
        push = model.commands["PUSH"].request["properties"]
        entry = model.commands["PUSHB"].request["properties"]["jobs"]["items"]["properties"]
        self.push_fields = frozenset(push) - {"cmd", "reqId", "queue", "data", "name"}
        self.bulk_fields = frozenset(entry) - {"data", "name"}
        self.top_level_name = "name" in push

    def _fields(self, opts: Mapping[str, Any], allowed: frozenset[str], custom_id: str,
                where: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in opts.items():
            if value is None:
                continue
            field = custom_id if key in ("job_id", "jobId", "custom_id", "customId") else \
                _ALIASES.get(key) or (key if key in allowed else camel(key))
            if field not in allowed:
                names = sorted({snake(f) for f in allowed} | {"attempts", "job_id"})
                raise ClientConfigError(f"{where} has no option {key!r} in profile "
                                        f"{self.profile.name}; its options: {', '.join(names)}")
            out[field] = value
        return out

    def named(self, name: str | None, data: Any) -> tuple[dict[str, Any], Any]:
        """(the top-level fields, the data) that carry ``name``."""
        if name is None:
            return {}, data
        if self.top_level_name:
            return {"name": name}, data
        if isinstance(data, Mapping) and "name" not in data:
            return {}, {"name": name, **data}  # BQ-NAME-102's envelope
        return {}, data

    def push(self, queue: str, name: str | None, data: Any, opts: Mapping[str, Any]) -> dict:
        top, data = self.named(name, data)
        return {"cmd": "PUSH", "queue": queue, **top, "data": data,
                **self._fields(opts, self.push_fields, "jobId", "PUSH")}

    def bulk_entry(self, name: str | None, data: Any, opts: Mapping[str, Any]) -> dict:
        if not opts and self.top_level_name and name is not None:  # the common entry
            return {"name": name, "data": data}
        top, data = self.named(name, data)
        return {**top, "data": data,
                **self._fields(opts, self.bulk_fields, "customId", "a PUSHB job")}

    def split(self, raw: Mapping[str, Any]) -> tuple[str, Any]:
        """(name, data) of a job map from the server."""
        name, data = raw.get("name"), raw.get("data")
        if not self.top_level_name and (name in (None, DEFAULT_NAME)) and isinstance(
                data, Mapping) and isinstance(data.get("name"), str):
            data = dict(data)
            name = data.pop("name")
        return (name if isinstance(name, str) else DEFAULT_NAME), data


class Job:
    """A job: its id, name and data, the server's other fields in ``raw`` (and as
    snake_case attributes), the lock ``token`` when it was pulled with one, and methods that
    act on it through the queue it came from."""

    __slots__ = ("id", "name", "data", "queue_name", "raw", "token", "_queue")

    def __init__(self, id: str, name: str, data: Any, queue_name: str,
                 raw: Any = None, token: str | None = None,
                 queue: Any = None):
        self.id, self.name, self.data, self.queue_name = id, name, data, queue_name
        self.raw = raw if raw is not None else {}
        self.token = token
        self._queue = queue

    @classmethod
    def from_wire(cls, codec: JobCodec, raw: Mapping[str, Any], token: str | None = None,
                  queue: Any = None) -> Job:
        name, data = codec.split(raw)
        return cls(str(raw.get("id")), name, data, str(raw.get("queue", "")), raw, token, queue)

    def __getattr__(self, attr: str) -> Any:
        raw = object.__getattribute__(self, "raw")
        key = camel(attr)
        if key in raw:
            return raw[key]
        raise AttributeError(f"Job has no field {attr!r} (the server sent: {sorted(raw)})")

    def __repr__(self) -> str:
        return f"Job(id={self.id!r}, name={self.name!r}, queue={self.queue_name!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Job) and (self.id, self.name, self.data, self.queue_name) == (
            other.id, other.name, other.data, other.queue_name)

    __hash__ = None  # type: ignore[assignment]

    def _q(self) -> Any:  # the Queue it came from (not imported: queue imports job)
        if self._queue is None:
            raise ClientConfigError("this job is not bound to a queue")
        return self._queue

    async def get_state(self) -> str:
        return await self._q().get_job_state(self.id)

    async def update_progress(self, progress: Any, message: str | None = None) -> None:
        await self._q().update_job_progress(self.id, progress, message)

    async def log(self, message: str) -> None:
        await self._q().add_job_log(self.id, message)

    async def remove(self) -> None:
        await self._q().remove(self.id)

    async def promote(self) -> None:
        await self._q().promote_job(self.id)

    async def wait_until_finished(self, timeout: float = 30000) -> Any:
        return await self._q().wait_job(self.id, timeout)
