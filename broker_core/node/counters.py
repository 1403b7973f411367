"""A broker's counters kept across its restarts, in `<data_dir>/counters.json`.

Topics and groups count from zero in memory (no file write on the hot path); what they counted before the broker's
last restart is carried here and added to the figures of /stats and /metrics, so a restart never makes a total
drop and Prometheus sees no counter reset. The file is written (atomically, only when a figure changed) every
`SAVE_S` seconds from the broker's timer and once more when it stops: a crash loses at most the counting of the
last `SAVE_S` seconds (Prometheus then sees a reset, which `rate()`/`increase()` handle).

A topic's `published` counts the messages made visible to its groups: plain messages when stored, transaction
messages when committed (`tx.committed`), so a transaction topic no longer shows 0 published.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger("broker_core.node")

SAVE_S = 1.0
NODE = ("auth_failures", "refused_connections")
# the figure in /stats → how it is read from a live Topic
TOPIC = {
    "published": lambda t: t.published + t.tx_committed,
    "published_bytes": lambda t: t.published_bytes,
    "publish_failures": lambda t: t.publish_failures,
    "redriven": lambda t: t.redriven,
}
TX = {"prepared_total": "tx_prepared", "committed": "tx_committed", "rolled_back": "tx_rolled_back"}


def live_counts(node: Mapping[str, int], topics: Mapping) -> dict:
    """The counters of a broker's live objects, counted since it started (`topics`: name → Topic)."""
    out: dict = {"node": dict(node), "topics": {}}
    for name, t in topics.items():
        figures = {k: read(t) for k, read in TOPIC.items()}
        figures.update({f"tx.{k}": getattr(t, attr) for k, attr in TX.items()})
        out["topics"][name] = {"figures": figures, "groups": {
            g: {k: getattr(group, k) for k in group.COUNTERS} for g, group in t.groups.items()}}
    return out


def _plus(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in {*a, *b}}


class CarriedCounters:
    def __init__(self, path: Path):
        self.path = path
        self.carried = self._load()
        self._last_saved: dict | None = None

    def _load(self) -> dict:
        try:
            carried = json.loads(self.path.read_text())
        except FileNotFoundError:
            return {"node": {}, "topics": {}}
        except (OSError, ValueError) as exc:  # a broken file costs the history, never the start
            log.error("could not read the counters of %s (%s): counting from zero", self.path, exc)
            return {"node": {}, "topics": {}}
        return {"node": carried.get("node", {}), "topics": carried.get("topics", {})}

    def totals(self, live: dict) -> dict:
        """Live counts plus what was carried over (topics and groups absent now keep their carried figures)."""
        topics = {}
        for name in {*self.carried["topics"], *live["topics"]}:
            old, new = self.carried["topics"].get(name, {}), live["topics"].get(name, {})
            old_groups, new_groups = old.get("groups", {}), new.get("groups", {})
            topics[name] = {"figures": _plus(old.get("figures", {}), new.get("figures", {})),
                            "groups": {g: _plus(old_groups.get(g, {}), new_groups.get(g, {}))
                                       for g in {*old_groups, *new_groups}}}
        return {"node": _plus(self.carried["node"], live["node"]), "topics": topics}

    def apply(self, stats: dict, live: dict) -> dict:
        """Put the totals into a /stats answer (in place) and return it."""
        totals = self.totals(live)
        stats.update({k: totals["node"][k] for k in NODE})
        for name, topic in stats["topics"].items():
            figures = totals["topics"][name]["figures"]
            topic.update({k: figures[k] for k in TOPIC})
            topic["tx"].update({k: figures[f"tx.{k}"] for k in TX})
            for g, group in topic["groups"].items():
                group.update(totals["topics"][name]["groups"][g])
        return stats

    def keep_only(self, topics: set[str]) -> None:
        """Forget what was carried for topics no longer here nor in the cluster's state (deleted ones)."""
        for name in [n for n in self.carried["topics"] if n not in topics]:
            del self.carried["topics"][name]

    def save(self, live: dict) -> None:
        totals = self.totals(live)
        if totals == self._last_saved:
            return
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps(totals, separators=(",", ":")))
            os.replace(tmp, self.path)
        except OSError as exc:
            log.error("could not save the counters to %s (%s); they are kept in memory", self.path, exc)
            return
        self._last_saved = totals
