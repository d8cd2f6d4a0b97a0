"""Idle deadlines of streams: the longest wait for the agent.

gRPC deadlines (``timeout=``) bound a whole call, which does not fit a
read of unknown length, a grep of unknown duration or an upload of unknown
size: there the bound is on each wait for the agent instead. For a response
stream (Read, Backup, Grep) that is the wait for its next message; for an
upload (Write) the wait for the agent to take the next message (gRPC flow
control holds it back while the agent reads nothing), and after the last
one the wait for its answer. Only the time spent waiting for the agent
counts, not the caller's own time between messages or in its data source.
A wait past the bound cancels the call and raises
:class:`~agentcomputer.errors.DeadlineExceededError`.

The blocking flavour watches with one thread per stream (started at the
first wait, ended with the stream); the asyncio flavour bounds each
``read()`` with :func:`asyncio.wait_for`, and an upload with one task.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, AsyncIterator, Iterator, Optional

import grpc
import grpc.aio

from ._guard import idle_message
from .errors import DeadlineExceededError


class Watch:
    """Cancels a call when one armed wait lasts ``seconds``. The call may be
    given later (:meth:`set_call`): one that fired before is cancelled then.
    :attr:`fired` tells the cancellation was the watch's."""

    def __init__(self, call: Any, seconds: float) -> None:
        self._call = call
        self._seconds = seconds
        self._cond = threading.Condition()
        self._armed_at: Optional[float] = None
        self._stopped = False
        self._thread: Optional[threading.Thread] = None
        self.fired = False

    def arm(self) -> None:
        with self._cond:
            self._armed_at = time.monotonic()
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="agentcomputer-idle", daemon=True)
                self._thread.start()
            self._cond.notify()

    def disarm(self) -> None:
        with self._cond:
            self._armed_at = None
            self._cond.notify()

    def stop(self) -> None:
        with self._cond:
            self._stopped = True
            self._cond.notify()

    def set_call(self, call: Any) -> None:
        with self._cond:
            self._call = call
            fired = self.fired
        if fired:
            call.cancel()

    def _run(self) -> None:
        with self._cond:
            while not self._stopped:
                if self._armed_at is None:
                    self._cond.wait()
                    continue
                left = self._armed_at + self._seconds - time.monotonic()
                if left <= 0:
                    self.fired = True
                    break
                self._cond.wait(left)
            call = self._call
        if self.fired and call is not None:
            call.cancel()


def messages(call: Any, idle: Optional[float], what: str) -> Iterator[Any]:
    """The messages of the sync response stream ``call``, each awaited at
    most ``idle`` seconds (``None``: forever). Raises DeadlineExceededError
    naming ``what`` when a wait passes it (the call is cancelled); other
    failures are the call's ``grpc.RpcError``."""
    if idle is None:
        yield from call
        return
    watch = Watch(call, idle)
    try:
        while True:
            watch.arm()
            try:
                m = next(call)
            except StopIteration:
                return
            except grpc.RpcError:
                if watch.fired:
                    raise DeadlineExceededError(idle_message(what, idle), code="DEADLINE_EXCEEDED") from None
                raise
            finally:
                watch.disarm()
            yield m
    finally:
        watch.stop()


async def amessages(call: Any, idle: Optional[float], what: str) -> AsyncIterator[Any]:
    """The messages of the grpc.aio response stream ``call``, as
    :func:`messages`."""
    while True:
        try:
            if idle is None:
                m = await call.read()
            else:
                m = await asyncio.wait_for(call.read(), idle)
        except asyncio.TimeoutError:
            call.cancel()
            raise DeadlineExceededError(idle_message(what, idle or 0.0), code="DEADLINE_EXCEEDED") from None
        if m is grpc.aio.EOF:
            return
        yield m


def requests(messages: Iterator[Any], watch: Watch) -> Iterator[Any]:
    """The request messages of an upload, ``watch`` armed while gRPC holds
    one (until it asks for the next) and after the last (until the answer;
    the caller stops the watch then)."""
    for m in messages:
        watch.arm()
        yield m
        watch.disarm()
    watch.arm()


class AsyncWatch:
    """The asyncio :class:`Watch`: :meth:`run` (a task) cancels :attr:`call`
    when one armed wait lasts ``seconds``."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.call: Any = None
        self.fired = False
        self._armed_at: Optional[float] = None
        self._changed = asyncio.Event()

    def arm(self) -> None:
        self._armed_at = time.monotonic()
        self._changed.set()

    def disarm(self) -> None:
        self._armed_at = None
        self._changed.set()

    async def run(self) -> None:
        while True:
            self._changed.clear()
            if self._armed_at is None:
                await self._changed.wait()
                continue
            left = self._armed_at + self.seconds - time.monotonic()
            if left <= 0:
                self.fired = True
                if self.call is not None:
                    self.call.cancel()
                return
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except asyncio.TimeoutError:
                pass


async def arequests(messages: AsyncIterator[Any], watch: AsyncWatch) -> AsyncIterator[Any]:
    """The asyncio :func:`requests`."""
    async for m in messages:
        watch.arm()
        yield m
        watch.disarm()
    watch.arm()
