"""How the asyncio face runs the one protocol core without a second copy of it.

The core (``Store``, ``Dispatcher``) is written once, as ordinary functions. The asyncio
face runs such a function through a *runner*, which gives it two things:

- ``run(fn, *args)``: a coroutine that calls ``fn`` without blocking the event loop;
- ``wait(awaitable)``: called from inside ``fn``, it suspends ``fn`` until the awaitable is
  done on the event loop and returns its result (or raises its exception).

Two runners:

- :class:`GreenletRunner` (PostgreSQL): ``fn`` runs in a greenlet on the event loop's own
  thread. Where the core would do I/O it calls ``wait`` on psycopg's async connection, and
  the greenlet switches back to the loop, which runs other tasks until the I/O is done:
  many tasks, each with its own pooled connection, truly interleave on one thread. (This
  is how SQLAlchemy runs its synchronous ORM over asyncio drivers.)
- :class:`ThreadRunner` (SQLite, memory): ``fn`` runs in a worker thread
  (``asyncio.to_thread``), because sqlite3 has no asynchronous API; ``wait`` hands the
  awaitable back to the loop and blocks that worker thread, never the loop.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import sys
from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from claimfsm.errors import UsageError

R = TypeVar("R")


class Runner(Protocol):
    async def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R: ...
    def wait(self, awaitable: Awaitable[R]) -> R: ...


def _greenlet_class() -> Any:
    try:
        import greenlet
    except ImportError as exc:  # pragma: no cover - the postgres extra brings it
        raise UsageError(
            "the asyncio PostgreSQL store needs greenlet: pip install 'claimfsm[postgres]'"
        ) from exc
    return greenlet.greenlet


@functools.cache
def _spawned_class() -> Any:
    """The greenlets ``GreenletRunner.run`` starts, so ``wait`` can tell them apart."""

    class Spawned(_greenlet_class()):  # type: ignore[misc]
        pass

    return Spawned


class GreenletRunner:
    """Run the core in a greenlet on the loop's thread; ``wait`` yields to the loop."""

    async def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        spawned = _spawned_class()
        context = contextvars.copy_context()
        child = spawned(functools.partial(context.run, fn, *args, **kwargs), spawned.getcurrent())
        result: Any = child.switch()
        # While the child is alive, whatever it switches back is an awaitable to wait for.
        while not child.dead:
            try:
                value = await result
            except BaseException:  # cancellation too: the core rolls back and re-raises
                result = child.throw(*sys.exc_info())
            else:
                result = child.switch(value)
        return result  # type: ignore[no-any-return]

    def wait(self, awaitable: Awaitable[R]) -> R:
        spawned = _spawned_class()
        current = spawned.getcurrent()
        if not isinstance(current, spawned):
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()  # never awaited: don't leave a warning behind
            raise UsageError(
                "an asyncio store's I/O ran outside its runner; call the async face's methods"
            )
        return current.parent.switch(awaitable)  # type: ignore[no-any-return]


class ThreadRunner:
    """Run the core in a worker thread; ``wait`` runs an awaitable on the loop."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None

    async def run(self, fn: Callable[..., R], *args: Any, **kwargs: Any) -> R:
        self._loop = asyncio.get_running_loop()
        return await asyncio.to_thread(fn, *args, **kwargs)

    def wait(self, awaitable: Awaitable[R]) -> R:
        loop = self._loop
        if loop is None:
            raise UsageError("an asyncio store's runner was used before it ran anything")

        async def awaited() -> R:
            return await awaitable

        return asyncio.run_coroutine_threadsafe(awaited(), loop).result()
