"""The dead-letter browser's reading side (docs/transactions.md "Dead-letter browser"): who may see or act on a
group's dead letters, and one page of them read from every live broker of the cluster, merged in the brokers'
order (dead time, then message id), with capped previews (pretty JSON when the body is JSON, otherwise hex).
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.core.exceptions import PermissionDenied, ValidationError

from apps.accounts.roles import ADMIN, AUDITOR, SRE, has_role
from apps.bindings.models import Binding
from apps.topics.models import Topic
from apps.transactions.broker_admin import BrokerAdmin, live_brokers
from apps.transactions.roles import BROWSE, MANAGE

PREVIEW_BYTES = 4096  # of each body, shown in the browser and the API
PAGE = 50
MAX_PAGE = 500


def binding_of(cluster, topic: str, group: str) -> Binding:
    """The active binding of the group to the topic on that cluster (a ValidationError naming the field that
    is wrong otherwise)."""
    found = Topic.objects.filter(name=topic, cluster=cluster).exclude(status="deleted").select_related("team").first()
    if found is None:
        raise ValidationError({"topic": f"Cluster {cluster.name} has no topic {topic!r}."})
    binding = Binding.objects.filter(topic=found, group=group, status="active").select_related(
        "topic__team", "topic__cluster").first()
    if binding is None:
        raise ValidationError({"group": f"No consumer group {group!r} is bound to topic {topic}."})
    return binding


def _own_team(user, topic: Topic) -> bool:
    return user.teams.filter(pk=topic.team_id).exists()


def may_browse(user, topic: Topic) -> bool:
    """SREs, auditors and admins: every topic; developers and approvers: their teams' topics."""
    if not user.has_perm(BROWSE):
        return False
    return has_role(user, SRE, AUDITOR, ADMIN) or user.is_superuser or _own_team(user, topic)


def may_manage(user, topic: Topic) -> bool:
    """SREs and admins: every topic; developers: their teams' topics; auditors and approvers: none."""
    if not user.has_perm(MANAGE):
        return False
    return has_role(user, SRE, ADMIN) or user.is_superuser or _own_team(user, topic)


def require_manage(actor, topic: Topic) -> None:
    if not may_manage(actor, topic):
        raise PermissionDenied(f"{getattr(actor, 'username', 'this user')} may not change the dead letters or "
                               f"positions of topic {topic.name} (SREs may on every topic, developers on their "
                               "team's topics)")


def ms(dt: datetime | None) -> int | None:
    return int(dt.timestamp() * 1000) if dt else None


@dataclass(frozen=True)
class DeadLetterQuery:
    """The browser's filters: exact message type, key and business id; dead between since and until."""

    message_type: str = ""
    key: str = ""
    business_id: str = ""
    since: datetime | None = None
    until: datetime | None = None

    def broker_params(self) -> dict:
        return {"message_type": self.message_type or None, "key": self.key or None,
                "business_id": self.business_id or None, "since_ms": ms(self.since), "until_ms": ms(self.until)}

    def stored(self) -> dict:
        """What a run keeps of the text filters (the time range has columns of its own)."""
        return {k: v for k, v in (("message_type", self.message_type), ("key", self.key),
                                  ("business_id", self.business_id)) if v}


@dataclass
class DeadLetterPage:
    rows: list[dict] = field(default_factory=list)
    total: int = 0
    next_after: str | None = None


def preview(row: dict) -> dict:
    """A listed dead letter with its body shown: pretty JSON when the (whole) body is JSON, else hex."""
    raw = base64.b64decode(row.get("body_preview") or "")
    text, kind = None, "hex"
    if not row.get("body_truncated"):
        try:
            text, kind = json.dumps(json.loads(raw.decode("utf-8")), indent=2, ensure_ascii=False), "json"
        except ValueError:
            pass
    if text is None:
        text = raw.hex(" ")
    dead_at = datetime.fromtimestamp(row["dead_ms"] / 1000, tz=UTC)
    return {**row, "body_kind": kind, "body_text": text, "preview_size": len(raw), "dead_at": dead_at}


def read_page(cluster, topic: str, group: str, query: DeadLetterQuery, *, after: str | None = None,
              limit: int = PAGE) -> DeadLetterPage:
    """One page of the group's dead letters that match, from every live broker (raises BrokerAdminError,
    ZooKeeperUnreachable). `after`: the page's cursor, the `next_after` of the previous page."""
    page = DeadLetterPage()
    rows, more = [], False
    for endpoint in live_brokers(cluster):
        with BrokerAdmin(endpoint) as admin:
            answer = admin.dead_letters(topic=topic, group=group, limit=limit, after=after,
                                        preview_bytes=PREVIEW_BYTES, **query.broker_params())
        page.total += answer.get("total", 0)
        rows += [{**row, "node_id": endpoint.node_id} for row in answer.get("dead_letters", [])]
        more = more or bool(answer.get("next_after"))
    rows.sort(key=lambda r: (r["dead_ms"], r["message_id"]))
    page.rows = [preview(r) for r in rows[:limit]]
    if page.rows and (more or len(rows) > limit):
        page.next_after = f"{page.rows[-1]['dead_ms']}:{page.rows[-1]['message_id']}"
    return page
