"""What the governance view reads: per topic and producing app, and the messages behind a row."""

from __future__ import annotations

from django.db.models import Count, Min, Q, QuerySet, Sum
from django.utils import timezone

from apps.accounts.roles import ADMIN, AUDITOR, SRE, has_role
from apps.topics.models import App, Topic
from apps.transactions.choices import ResolutionSource, TxState
from apps.transactions.models import PreparedMessage

SOURCES = [s.value for s in ResolutionSource]


def visible_messages(user) -> QuerySet[PreparedMessage]:
    """SREs, auditors and admins see every cluster; developers and approvers their teams' topics and apps."""
    qs = PreparedMessage.objects.all()
    if has_role(user, SRE, AUDITOR, ADMIN):
        return qs
    teams = user.teams.all()
    topics = Topic.objects.filter(team__in=teams).values_list("name", flat=True)
    apps = App.objects.filter(team__in=teams).values_list("app_id", flat=True)
    return qs.filter(Q(topic__in=topics) | Q(app_id__in=apps))


def summary(qs: QuerySet[PreparedMessage]) -> list[dict]:
    """One row per (cluster, topic, producing app): backlog, oldest age, checks done, outcomes, unresolved."""
    prepared = Q(state=TxState.PREPARED)
    outcomes = {}
    for state in (TxState.COMMITTED, TxState.ROLLED_BACK):
        for source in SOURCES:
            outcomes[f"{state}_{source}"] = Count("id", filter=Q(state=state, resolution_source=source))
    rows = (qs.values("cluster__name", "topic", "app_id")
            .annotate(backlog=Count("id", filter=prepared), oldest=Min("prepared_at", filter=prepared),
                      checks_done=Sum("checks_done"), unresolved=Count("id", filter=Q(state=TxState.UNRESOLVED)),
                      total=Count("id"), **outcomes)
            .order_by("cluster__name", "topic", "app_id"))
    now = timezone.now()
    out = []
    for r in rows:
        out.append({
            "cluster": r["cluster__name"], "topic": r["topic"], "app_id": r["app_id"], "total": r["total"],
            "backlog": r["backlog"],
            "oldest_age_s": int((now - r["oldest"]).total_seconds()) if r["oldest"] else None,
            "checks_done": r["checks_done"] or 0,
            "committed": {s: r[f"committed_{s}"] for s in SOURCES if s != ResolutionSource.EXHAUSTED},
            "rolled_back": {s: r[f"rolled_back_{s}"] for s in SOURCES if s != ResolutionSource.EXHAUSTED},
            "unresolved": r["unresolved"],
        })
    return out
