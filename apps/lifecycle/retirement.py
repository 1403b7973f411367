"""The end of retired topics, run periodically (lifecycle.sweep_retired): bindings whose backlog the brokers
report consumed are retired; a topic with no binding left is deleted once its retention after retirement has
passed. The writes are actions (apps/lifecycle/actions.py); this module decides and reads the brokers.
"""

from __future__ import annotations

import logging

from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.bindings.choices import BindingStatus
from apps.bindings.models import Binding
from apps.lifecycle import actions
from apps.lifecycle.drain import Drain, read_drain
from apps.provisioning.placement import holders
from apps.topics.choices import TopicStatus
from apps.topics.models import Topic
from control_plane.errors import ActionError

log = logging.getLogger(__name__)


def drain_of(topic: Topic) -> Drain:
    return read_drain(topic.name, holders(topic))


def sweep(*, actor, now=None) -> dict:
    """Every retired topic once. Returns what it did, for the task's result and the log."""
    now = now or timezone.now()
    summary = {"topics": 0, "bindings_retired": 0, "topics_deleted": 0, "unread": []}
    for topic in Topic.objects.filter(status=TopicStatus.RETIRED).select_related("cluster"):
        summary["topics"] += 1
        try:
            _sweep_topic(topic, actor, now, summary)
        except (ActionError, ValidationError) as exc:  # changed meanwhile (an SRE dropped it, …): next run
            log.info("retired topic %s: %s", topic.name, exc)
    return summary


def _sweep_topic(topic: Topic, actor, now, summary: dict) -> None:
    bindings = list(Binding.objects.filter(topic=topic, status=BindingStatus.ACTIVE))
    if bindings:
        drain = drain_of(topic)
        if not drain.complete:
            summary["unread"].append(topic.name)
            log.warning("retired topic %s: backlog not known (%s); its %d binding(s) stay", topic.name,
                        "; ".join(drain.errors), len(bindings))
            return
        if drain.figures["prepared"]:
            log.info("retired topic %s: %d prepared messages unresolved; bindings stay", topic.name,
                     drain.figures["prepared"])
            return
        for binding in bindings:
            figures = drain.group(binding.group)
            if figures["backlog"] == 0:  # in flight included
                actions.retire_drained_binding(actor=actor, binding=binding, figures=figures)
                summary["bindings_retired"] += 1
        if Binding.objects.filter(topic=topic, status=BindingStatus.ACTIVE).exists():
            return
    if now >= topic.data_deleted_after:
        actions.delete_topic(actor=actor, topic=topic, now=now)
        summary["topics_deleted"] += 1
