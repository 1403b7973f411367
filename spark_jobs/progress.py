"""Progress of a long Spark action, told as its tasks finish (Spark's status tracker, polled by a thread).

The index job's main stage summarizes, writes and loads one partition per task, so the share of its tasks
done is the share of the work done: `watched` reports it as a percent between two marks while the action
runs.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def watched(spark, progress: Callable[..., None], stage: str, start: int, end: int,
            every_s: float = 1.0) -> Iterator[None]:
    """Run the Spark actions of the block as one job group; while they run, call `progress(stage, percent,
    tasks_done=, tasks=)` whenever more of their tasks are done (percent from `start` to `end`)."""
    sc = spark.sparkContext
    group = f"{stage}-{uuid.uuid4().hex[:8]}"
    sc.setJobGroup(group, stage)
    stop = threading.Event()

    def watch() -> None:
        tracker, last, shown = sc.statusTracker(), None, start
        while not stop.wait(every_s):
            done = total = 0
            for job in tracker.getJobIdsForGroup(group):
                info = tracker.getJobInfo(job)
                for stage_id in info.stageIds if info else ():
                    stage_info = tracker.getStageInfo(stage_id)
                    if stage_info:
                        done += stage_info.numCompletedTasks
                        total += stage_info.numTasks
            if total and (done, total) != last:
                # later stages add their tasks as they are planned: the percent never goes back
                last, shown = (done, total), max(shown, start + (end - start) * done // total)
                progress(stage, shown, tasks_done=done, tasks=total)

    thread = threading.Thread(target=watch, name="index-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        sc.setLocalProperty("spark.jobGroup.id", None)
        sc.setLocalProperty("spark.job.description", None)
