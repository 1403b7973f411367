"""Reads of the tracing index shared by the web pages and the API."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Exists, OuterRef, QuerySet

from apps.clusters.models import Cluster
from apps.topics.models import Topic
from apps.tracing.models import TracedMessage
from apps.tracing.roles import ALL_TOPICS


def traces_every_topic(user) -> bool:
    return user.has_perm(ALL_TOPICS)


def visible_messages(user, queryset: QuerySet | None = None) -> QuerySet:
    """The messages `user` may trace: all of them with `trace_all_topics` (auditors, SREs, admins); otherwise
    those of topics a team of theirs owns. A message belongs to the topic of its name in the environment of
    the cluster it was traced on (a name is unique per environment); a message of a cluster the platform does
    not know belongs to no team."""
    queryset = TracedMessage.objects.all() if queryset is None else queryset
    if traces_every_topic(user):
        return queryset
    environment = Cluster.objects.filter(name=OuterRef(OuterRef("cluster"))).values("environment")
    owned = Topic.objects.filter(team__members=user, name=OuterRef("topic"), environment__in=environment)
    # the names as a list of values: PostgreSQL then reads only those topics' rows off the (topic, first_at)
    # index (a search for another team's topic reads none); the subquery settles the environment
    return queryset.filter(topic__in=owned_topic_names(user)).filter(Exists(owned))


def owned_topic_names(user) -> list[str]:
    """The names of the topics of `user`'s teams, once per request (kept on the user object of the request)."""
    names = getattr(user, "_trace_topic_names", None)
    if names is None:
        names = sorted(set(Topic.objects.filter(team__members=user).values_list("name", flat=True)))
        user._trace_topic_names = names
    return names


def may_trace(user, message: TracedMessage) -> bool:
    return traces_every_topic(user) or visible_messages(user, TracedMessage.objects.filter(pk=message.pk)).exists()


@dataclass(frozen=True)
class TraceEvent:
    """One step of a message (docs/trace-events.md)."""

    event_id: str
    ts_us: int
    rank: int
    event: str
    group_name: str | None = None
    attempt: int | None = None
    consumer: str | None = None
    client_host: str | None = None
    broker: str | None = None
    app_id: str | None = None
    detail: str | None = None
    size: int | None = None

    @property
    def at(self) -> datetime:
        return datetime.fromtimestamp(self.ts_us // 1_000_000, UTC).replace(microsecond=self.ts_us % 1_000_000)


def timeline_order(e: TraceEvent) -> tuple:
    """By time; within one microsecond by attempt (a step of no attempt, like published or redriven, as 0),
    so attempt n's outcome comes before attempt n+1's delivery; then by the kind's rank, then event id."""
    return e.ts_us, e.attempt or 0, e.rank, e.event_id


def timeline_of(message: TracedMessage) -> list[TraceEvent]:
    events = [TraceEvent(group_name=e.pop("group", None), **e) for e in json.loads(message.timeline or "[]")]
    return sorted(events, key=timeline_order)


def group_states(message: TracedMessage) -> dict[str, str]:
    return {g["group"]: g["state"] for g in message.groups or []}
