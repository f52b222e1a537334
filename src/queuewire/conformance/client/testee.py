"""The testee contract's runner side: a client under test as a process speaking JSON lines.

:class:`Testee` starts the testee command once (``shlex``-split, or through the shell when
it contains shell syntax; or once per scenario with ``per_scenario``, stopped after its
answer), writes one request line per scenario on its stdin and reads lines
from its stdout until the line answering that scenario (``{"scenario": id, "results": [...]}``);
other stdout lines are kept as the testee's log, as is its stderr (the last lines are shown
when a scenario cannot be judged). A testee that exits, or does not answer within the
scenario's limit, is stopped and started again for the next scenario; the scenario is an
ERROR. The contract itself is documented in docs/conformance/client-testee.md.

A testee is a peer like any other, so what it may cost is bounded: a stdout line longer than
``MAX_LINE_BYTES`` (the contract's line limit) breaks the contract: the testee is killed at
once (it may be blocked writing the rest of the line), started again for the next scenario,
and the scenario is an ERROR naming the limit (``kind`` ``line``). Its stderr is read in
chunks, so a long stderr line costs nothing more; each line kept in the log is clipped to
``LOG_LINE_CHARS`` (head and tail, :func:`~.records.clip`), and the log keeps the last
``LOG_LINES``. A line that is not a JSON object, JSON nested too deep to parse included, is a
log line.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shlex
from collections import deque
from typing import Any

__all__ = ["Testee", "TesteeError"]

from .records import clip

LOG_LINES = 40
#: the testee contract's line limit: an answer is a few KiB (one result per action); 16 MiB
#: leaves room for data-heavy answers and bounds what one line costs the runner
MAX_LINE_BYTES = 16 * 1024 * 1024
#: characters of one log line kept (the log is quoted in an ERROR's message and the reports)
LOG_LINE_CHARS = 2000
STDERR_CHUNK = 64 * 1024
SHELL_CHARS = set("|&;<>()$`\\\"'*?[]#~=%")


class TesteeError(Exception):
    """The testee could not be started, exited, did not answer in time or broke the contract's
    line limit (``kind``: ``start``, ``exited``, ``timeout``, ``line``; the fuzz mode tells a
    hang from the rest by it)."""

    def __init__(self, message: str, kind: str = "exited"):
        super().__init__(message)
        self.kind = kind


class Testee:
    __test__ = False  # not a pytest test class
    def __init__(self, command: str, *, cwd: str | None = None, label: str | None = None,
                 env: dict[str, str] | None = None, per_scenario: bool = False):
        self.command = command
        #: start a fresh process for every scenario (and stop it after its answer)
        self.per_scenario = per_scenario
        self.cwd = cwd
        self.label = label or command
        self.env = env
        self.proc: asyncio.subprocess.Process | None = None
        self.log: deque[str] = deque(maxlen=LOG_LINES)
        self._stderr_task: asyncio.Task | None = None

    async def start(self) -> None:
        env = {**os.environ, **(self.env or {})}
        try:
            if set(self.command) & SHELL_CHARS:
                self.proc = await asyncio.create_subprocess_shell(
                    self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, cwd=self.cwd, env=env, limit=MAX_LINE_BYTES)
            else:
                argv = shlex.split(self.command)
                self.proc = await asyncio.create_subprocess_exec(
                    *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.PIPE, cwd=self.cwd, env=env, limit=MAX_LINE_BYTES)
        except OSError as exc:
            raise TesteeError(f"cannot start testee {self.command!r}: {exc}",
                              "start") from None
        self._stderr_task = asyncio.get_running_loop().create_task(self._drain_stderr())

    def _log(self, stream: str, text: str) -> None:
        self.log.append(f"{stream}: " + clip(text.rstrip(), LOG_LINE_CHARS))

    async def _drain_stderr(self) -> None:
        """Keep the testee's stderr lines, read in chunks: a line of any length costs at most
        ``LOG_LINE_CHARS`` plus one chunk."""
        assert self.proc is not None and self.proc.stderr is not None
        partial = ""
        while True:
            chunk = await self.proc.stderr.read(STDERR_CHUNK)
            if not chunk:
                if partial:
                    self._log("stderr", partial)
                return
            *lines, rest = (partial + chunk.decode("utf-8", "replace")).split("\n")
            for line in lines:
                self._log("stderr", line)
            partial = clip(rest, 2 * LOG_LINE_CHARS)

    def tail(self, n: int = 8) -> str:
        return " | ".join(list(self.log)[-n:])

    async def run(self, request: dict[str, Any], limit: float) -> dict[str, Any]:
        """Send one scenario's request; the testee's answer to it (raises TesteeError)."""
        if self.proc is None or self.proc.returncode is not None:
            await self.start()
        assert self.proc is not None and self.proc.stdin is not None
        assert self.proc.stdout is not None
        try:
            self.proc.stdin.write((json.dumps(request) + "\n").encode())
            await self.proc.stdin.drain()
        except (ConnectionError, OSError) as exc:
            await self.stop()
            raise TesteeError(f"testee's stdin is closed ({exc}); {self.tail()}") from None
        try:
            async with asyncio.timeout(limit):
                while True:
                    try:
                        line = await self.proc.stdout.readline()
                    except ValueError:   # asyncio's LimitOverrunError, as readline raises it
                        await self.stop(kill=True)
                        raise TesteeError(
                            f"the testee wrote a stdout line over {MAX_LINE_BYTES // 2**20} MiB, "
                            "the testee contract's line limit (MAX_LINE_BYTES): it was killed "
                            f"and is started again for the next scenario; {self.tail()}",
                            "line") from None
                    if not line:
                        code = await self.proc.wait()
                        raise TesteeError(f"testee exited with status {code}; {self.tail()}")
                    text = line.decode("utf-8", "replace").strip()
                    try:
                        doc = json.loads(text)
                    except (ValueError, RecursionError):
                        self._log("stdout", text)
                        continue
                    if isinstance(doc, dict) and doc.get("scenario") == request["scenario"]:
                        if self.per_scenario:
                            await self.stop()
                        return doc
                    self._log("stdout", text)
        except TimeoutError:
            await self.stop()
            raise TesteeError(f"testee gave no answer within {limit:.0f} s; {self.tail()}",
                              "timeout") from None
        except TesteeError:
            await self.stop()
            raise

    async def stop(self, *, kill: bool = False) -> None:
        """End the testee: close its stdin and give it 3 s to exit, then kill it (at once
        with ``kill``)."""
        proc, self.proc = self.proc, None
        if proc is None:
            return
        if proc.returncode is None and kill:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if proc.returncode is None:
            with contextlib.suppress(Exception):
                assert proc.stdin is not None
                proc.stdin.close()
            try:
                await asyncio.wait_for(proc.wait(), 3)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                await proc.wait()
        if self._stderr_task is not None:
            self._stderr_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._stderr_task
            self._stderr_task = None
