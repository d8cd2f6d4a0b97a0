"""Idle deadlines of response streams: the longest wait for the agent's
next message.

gRPC deadlines (``timeout=``) bound a whole call, which does not fit a
read of unknown length or a grep of unknown duration: there the bound is
on each wait for the next message instead. Only the time spent waiting for
the agent counts, not the caller's own time between messages. A wait past
the bound cancels the call and raises
:class:`~agentcomputer.errors.DeadlineExceededError`.

The blocking flavour watches with one thread per stream (started at the
first wait, ended with the stream); the asyncio flavour bounds each
``read()`` with :func:`asyncio.wait_for`.
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


class _Watch:
    """Cancels ``call`` when one armed wait lasts ``seconds``."""

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
        if self.fired:
            self._call.cancel()


def messages(call: Any, idle: Optional[float], what: str) -> Iterator[Any]:
    """The messages of the sync response stream ``call``, each awaited at
    most ``idle`` seconds (``None``: forever). Raises DeadlineExceededError
    naming ``what`` when a wait passes it (the call is cancelled); other
    failures are the call's ``grpc.RpcError``."""
    if idle is None:
        yield from call
        return
    watch = _Watch(call, idle)
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
