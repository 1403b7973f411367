"""Prometheus figures of the back-checks, served at the control plane's /metrics (web process).

They are read from the database at scrape time, so they hold whichever worker did the work (a counter kept
in a worker's memory would be served by nobody and lost with the worker).
"""

from __future__ import annotations

from django.db.models import Count
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from apps.transactions.choices import TxState
from apps.transactions.models import PreparedMessage


class TxCollector:
    """Read at scrape time: unresolved messages (ever) and the prepared backlog, per cluster and topic."""

    def collect(self):
        unresolved = CounterMetricFamily("switchyard_tx_unresolved", "Prepared messages rolled back after "
                                         "their last back-check (recorded)", labels=["cluster", "topic"])
        backlog = GaugeMetricFamily("switchyard_tx_prepared_backlog", "Prepared messages seen by the sweep "
                                    "and not resolved yet", labels=["cluster", "topic"])
        rows = (PreparedMessage.objects.filter(state__in=[TxState.UNRESOLVED, TxState.PREPARED])
                .values_list("cluster__name", "topic", "state").annotate(n=Count("id")))
        for cluster, topic, state, n in rows:
            (unresolved if state == TxState.UNRESOLVED else backlog).add_metric([cluster, topic], n)
        yield unresolved
        yield backlog
