"""What an application puts into ZooKeeper, as (kind, object id) units: read by the writes (actions), the push
(provision) and the sync state shown (status)."""

from __future__ import annotations

from apps.provisioning.models import ObjectKind


def units_of(application) -> list[tuple[str, int]]:
    """The objects an approved application puts into ZooKeeper, in the order they are written."""
    if application.kind == "topic":
        return [(ObjectKind.TOPIC, application.topic_id), (ObjectKind.ROUTE, application.topic_id)]
    if application.kind == "binding":
        return [(ObjectKind.APP, application.app_id), (ObjectKind.BINDING, application.binding_id)]
    if application.kind == "grant":
        return [(ObjectKind.APP, application.app_id), (ObjectKind.GRANT, application.grant_id)]
    raise ValueError(application.kind)
