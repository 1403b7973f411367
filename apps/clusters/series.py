"""The console's plots: fixed PromQL queries run on the control plane's Prometheus, never PromQL from the browser.

A scope says what is plotted: a whole cluster, one topic, or one group (a binding). Each panel is a list of fixed
query templates; the only values put into them are the scope's names (from the database, quoted) and durations
worked out here from one of `RANGES`. The answer is JSON with one time axis for every panel (uPlot's aligned data):

    {"range": "1h", "start": s, "end": s, "step": s, "times": [s, ...],
     "panels": [{"id", "title", "unit", "series": [{"name", "values": [float | null, ...]}]}],
     "totals": {"published": int, ...}, "in_range": {"published": int, ...}}

`totals` are the counters' last values summed over the brokers (last seen in the range, so a broker down for a
moment still counts): brokers keep their counters across restarts (broker_core/node/counters.py), so these are
the totals since each topic and group began. `in_range` is `increase()` over the range, which adds across a
counter's resets (a crashed broker's last second) and is extrapolated by Prometheus to the range's ends (about; never
more than the total).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass

import httpx
from django.conf import settings

RANGES = {"15m": 15 * 60, "1h": 3600, "6h": 6 * 3600, "24h": 24 * 3600}
POINTS = 240  # per series: enough for a page-wide plot, cheap for Prometheus

# Every figure is taken once per broker (its own `exported_node` label) before it is added up: when a target is
# listed twice for a moment (a new broker on an old one's address, until the targets file is written again), the
# same broker is scraped under two sets of target labels, and a plain sum would count it twice.
TOPIC_SERIES = "max by (exported_node, topic) ({e})"
GROUP_SERIES = "max by (exported_node, topic, group) ({e})"


def _per_topic(expr: str) -> str:
    return "sum(" + TOPIC_SERIES.replace("{e}", expr) + ")"


def _per_group(expr: str, outer: str = "sum") -> str:
    return outer + "(" + GROUP_SERIES.replace("{e}", expr) + ")"


# (id, title, unit, [(series name, query template)]); {s} is the scope's selector, {t} the same without the group,
# {w} the rate window
PANELS = [
    ("rates", "Publish and delivery rate", "msg/s", [
        ("published", _per_topic("rate(switchyard_topic_published_total{t}[{w}])")),
        ("delivered", _per_group("rate(switchyard_group_delivered_total{s}[{w}])")),
        ("acked", _per_group("rate(switchyard_group_acked_total{s}[{w}])")),
    ]),
    ("backlog", "Backlog", "messages", [
        ("waiting", _per_group("switchyard_group_depth{s}")),
        ("in flight", _per_group("switchyard_group_in_flight{s}")),
    ]),
    ("lag", "Oldest unacknowledged message", "seconds", [
        ("age", _per_group("switchyard_group_oldest_age_seconds{s}", outer="max")),
    ]),
    ("redeliveries", "Redeliveries and dead letters", "msg/s", [
        ("redelivered", _per_group("rate(switchyard_group_redelivered_total{s}[{w}])")),
        ("dead-lettered", _per_group("rate(switchyard_group_dead_lettered_total{s}[{w}])"
                                     " + rate(switchyard_group_expired_total{s}[{w}])")),
    ]),
    ("dead_letters", "Dead-letter queue", "messages", [
        ("entries", _per_group("switchyard_group_dead_letter_queue{s}")),
    ]),
    ("consumers", "Consumers connected", "consumers", [
        ("consumers", _per_group("switchyard_group_consumers{s}")),
    ]),
]
# (name, counter selector, how one broker's series of it are told apart)
TOTALS = [
    ("published", "switchyard_topic_published_total{t}", TOPIC_SERIES),
    ("delivered", "switchyard_group_delivered_total{s}", GROUP_SERIES),
    ("acked", "switchyard_group_acked_total{s}", GROUP_SERIES),
    ("redelivered", "switchyard_group_redelivered_total{s}", GROUP_SERIES),
    ("dead_lettered", "switchyard_group_dead_lettered_total{s}", GROUP_SERIES),
]


class PrometheusUnavailable(Exception):
    """Prometheus did not answer (or answered an error): the page says so where the plots would be."""


@dataclass(frozen=True)
class Scope:
    """What a plot covers: a cluster, a topic of it, or a group of that topic."""

    cluster: str
    topic: str = ""
    group: str = ""

    def selector(self, with_group: bool = True) -> str:
        labels = [("cluster", self.cluster), ("topic", self.topic), ("group", self.group if with_group else "")]
        return "{" + ", ".join(f"{k}={_quote(v)}" for k, v in labels if v) + "}"


def _quote(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _duration(seconds: int) -> str:
    return f"{int(seconds)}s"


def _fill(template: str, scope: Scope, window: int) -> str:
    # str.replace, not format(): PromQL is full of braces
    return (template.replace("{s}", scope.selector()).replace("{t}", scope.selector(with_group=False))
            .replace("{w}", _duration(window)))


def plan(range_key: str, now: float | None = None) -> tuple[int, int, int, int]:
    """(start, end, step, rate window) for one of RANGES, aligned on the step so that refreshes line up."""
    seconds = RANGES[range_key]
    step = max(5, math.ceil(seconds / POINTS))
    # the last step is at or after now (not floored to the second, which can fall before the latest scrape)
    end = math.ceil((now or time.time()) / step) * step
    window = max(60, 2 * step)  # at least a few scrapes in every rate()
    return end - seconds, end, step, window


class Prometheus:
    """The HTTP API of the control plane's Prometheus (SWITCHYARD_PROMETHEUS_URL), read-only."""

    def __init__(self, base_url: str | None = None, timeout: float | None = None):
        self.base_url = (base_url or settings.SWITCHYARD_PROMETHEUS_URL).rstrip("/")
        self.client = httpx.Client(timeout=timeout or settings.SWITCHYARD_PROMETHEUS_TIMEOUT, trust_env=False)

    def __enter__(self) -> Prometheus:
        return self

    def __exit__(self, *exc) -> None:
        self.client.close()

    def _get(self, path: str, params: dict) -> list[dict]:
        url = f"{self.base_url}{path}"
        try:
            response = self.client.get(url, params=params)
            answer = response.json()
        except (httpx.HTTPError, ValueError) as exc:
            raise PrometheusUnavailable(f"Prometheus at {self.base_url} did not answer "
                                        f"({exc or type(exc).__name__}): check that it runs (./dev status)") from exc
        if answer.get("status") != "success":
            raise PrometheusUnavailable(f"Prometheus at {self.base_url} refused a query: {answer.get('error')}")
        return answer["data"]["result"]

    def query_range(self, query: str, start: int, end: int, step: int) -> list[dict]:
        return self._get("/api/v1/query_range", {"query": query, "start": start, "end": end, "step": step})

    def query(self, query: str, at: float | None = None) -> list[dict]:
        """An instant query at `at`, or at Prometheus's own now (never a whole second early: a sample scraped in the
        current second would be missed)."""
        return self._get("/api/v1/query", {"query": query} if at is None else {"query": query, "time": at})


def _aligned(result: list[dict], times: list[int]) -> list[float | None]:
    """One series' values on the common time axis (None where Prometheus has no sample)."""
    index = {t: i for i, t in enumerate(times)}
    values: list[float | None] = [None] * len(times)
    for series in result[:1]:  # every query aggregates to one series
        for t, v in series["values"]:
            i = index.get(int(float(t)))
            if i is not None and v not in ("NaN", "+Inf", "-Inf"):
                values[i] = float(v)
    return values


def _scalar(result: list[dict]) -> int:
    return round(float(result[0]["value"][1])) if result else 0


def read_series(prometheus: Prometheus, scope: Scope, range_key: str, now: float | None = None) -> dict:
    """Run every panel's queries for `scope` over `range_key` (one of RANGES); raises PrometheusUnavailable."""
    at = now  # the totals: at the caller's time, or Prometheus's now (which has every sample scraped so far)
    start, end, step, window = plan(range_key, now)
    times = list(range(start, end + 1, step))
    panels = []
    for panel_id, title, unit, queries in PANELS:
        series = [{"name": name, "values": _aligned(prometheus.query_range(_fill(q, scope, window), start, end, step),
                                                    times)} for name, q in queries]
        panels.append({"id": panel_id, "title": title, "unit": unit, "series": series})
    totals, in_range = {}, {}
    for name, counter, per_broker in TOTALS:  # read now, not at the plots' last step
        selected = f"{_fill(counter, scope, window)}[{_duration(end - start)}]"
        totals[name] = _scalar(prometheus.query(
            "sum(" + per_broker.replace("{e}", f"last_over_time({selected})") + ")", at))
        # extrapolated to the range's ends, increase() overshoots on young series: never more than the total
        in_range[name] = min(totals[name], _scalar(prometheus.query(
            "sum(" + per_broker.replace("{e}", f"increase({selected})") + ")", at)))
    return {"range": range_key, "start": start, "end": end, "step": step, "times": times, "panels": panels,
            "totals": totals, "in_range": in_range}
