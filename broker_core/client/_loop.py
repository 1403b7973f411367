"""An event loop on a background thread, for the SDK's synchronous classes."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from concurrent.futures import Future

try:
    import uvloop
except ImportError:  # optional: plain asyncio works, slower
    uvloop = None


def new_event_loop() -> asyncio.AbstractEventLoop:
    if uvloop is None:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


class LoopThread:
    def __init__(self, name: str):
        self.loop = new_event_loop()
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.loop.run_forever()

    def submit(self, coro: Coroutine) -> Future:
        return asyncio.run_coroutine_threadsafe(coro, self.loop)

    def run(self, coro: Coroutine, timeout: float | None = None):
        return self.submit(coro).result(timeout)

    @staticmethod
    async def _cancel_tasks() -> None:
        current = asyncio.current_task()
        tasks = [t for t in asyncio.all_tasks() if t is not current]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    def call(self, fn, *args) -> None:
        self.loop.call_soon_threadsafe(fn, *args)

    def apply(self, fn, *args, timeout: float = 10):
        """Run `fn(*args)` on the loop (where the client's state changes) and return its result."""
        async def call():
            return fn(*args)
        return self.run(call(), timeout)

    def stop(self) -> None:
        if self.loop.is_closed():
            return
        try:
            self.run(self._cancel_tasks(), timeout=5)
        except Exception:  # stopping must go on
            pass
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()
