"""Progress of the index job's Spark work, told as its tasks finish.

The job's work is two steps of tasks: one task per trace file reads and cuts it, then one task per shuffle
partition summarizes, writes and loads that partition. Each task adds one to its step's counter (a Spark
accumulator, brought to the driver when the task ends), and a thread of the driver reports, every second
that a count changed, the step under way and how many of its tasks are done (`reading trace files
(3 of 14)`) and a percent between two marks
(each step an equal share), so a run's page moves while the load runs too.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager


class StepProgress:
    def __init__(self, spark, progress: Callable[..., None], steps: dict[str, int], start: int, end: int):
        self.progress, self.steps, self.start, self.end = progress, steps, start, end
        self.counters = {name: spark.sparkContext.accumulator(0) for name in steps}
        self.shown = start
        self._lock = threading.Lock()
        self._last = None

    def counter(self, name: str):
        return self.counters[name]

    def done(self) -> dict[str, int]:
        # a retried task may count twice: never more than the step's tasks
        return {name: min(self.counters[name].value, total) for name, total in self.steps.items()}

    def percent(self) -> int:
        done = self.done()
        share = sum(done[n] / total for n, total in self.steps.items() if total) / max(len(self.steps), 1)
        with self._lock:
            # the percent never goes back
            self.shown = max(self.shown, self.start + int((self.end - self.start) * share))
            return self.shown

    def report(self) -> None:
        done = self.done()
        if done == self._last:
            return
        self._last = done
        step = next((n for n, total in self.steps.items() if done[n] < total), list(self.steps)[-1])
        self.progress(f"{step} ({done[step]} of {self.steps[step]})", self.percent(), tasks_done=done[step],
                      tasks=self.steps[step])


@contextmanager
def watched(spark, progress: Callable[..., None], steps: dict[str, int], start: int, end: int,
            every_s: float = 1.0) -> Iterator[StepProgress]:
    """Count the tasks of `steps` (name → how many tasks make it, in the order they run) while the block
    runs, reporting with `progress(step, percent, tasks_done=, tasks=)` (percent from `start` to `end`)."""
    watcher = StepProgress(spark, progress, steps, start, end)
    stop = threading.Event()

    def watch() -> None:
        while not stop.wait(every_s):
            watcher.report()

    thread = threading.Thread(target=watch, name="index-progress", daemon=True)
    thread.start()
    try:
        yield watcher
    finally:
        stop.set()
        thread.join()
        watcher.report()  # the counts as the block left them
