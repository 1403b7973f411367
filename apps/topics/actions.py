"""Writes to apps (credentials), topic applications and topics: atomic, permission-checked, audited.

The workflow itself (submit, withdraw, approve, reject) is shared: apps/governance/actions.py.
"""

from __future__ import annotations

import re
from datetime import timedelta

from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from apps.accounts.roles import ADMIN, has_role
from apps.audit.recorder import audited, record
from apps.audit.snapshot import snapshot
from apps.governance import actions as workflow
from apps.provisioning import actions as provisioning
from apps.provisioning.desired import clusters_of_app
from apps.provisioning.models import ObjectKind
from apps.topics.models import App, Topic, TopicApplication
from apps.transactions import outgoing
from broker_core.auth import hash_secret, new_secret
from control_plane.errors import require_perm

OLD_SECRET_DEFAULT_S = 3600  # a rotation's overlap when none is chosen: one hour
OLD_SECRET_MAX_S = 7 * 24 * 3600

APPLICATION_FIELDS = TopicApplication.fields_asked


# --- apps ---------------------------------------------------------------------------------


@audited
def create_app(*, actor, app_id: str, team, description: str = "") -> tuple[App, str]:
    """Create an app; returns it with its secret, which is shown this once and stored only hashed."""
    require_perm(actor, "topics.add_app")
    workflow.require_member(actor, team)
    secret = new_secret()
    app = App(app_id=app_id, team=team, description=description, secret_hash=hash_secret(secret),
              secret_rotated_at=timezone.now(), created_by=actor if getattr(actor, "pk", None) else None)
    app.full_clean()
    app.save()
    record(actor=actor, action="app.create", obj=app, after=snapshot(app))
    return app, secret


def _require_app_owner(actor, app: App) -> None:
    require_perm(actor, "topics.change_app")
    if actor is not None and not has_role(actor, ADMIN) and not app.team.members.filter(pk=actor.pk).exists():
        raise PermissionDenied(f"Only members of team {app.team.name} may change app {app.app_id}.")


def push_app(app: App) -> None:
    """Send the app's new revision to every cluster that knows it."""
    provisioning.schedule_on_clusters(clusters_of_app(app), [(ObjectKind.APP, app.pk)])


def validate_old_secret_valid_for(value) -> int:
    """Seconds the old secret stays accepted after a rotation: a whole number from 0 (at once) to 7 days."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= OLD_SECRET_MAX_S:
        raise ValidationError({"old_secret_valid_for_s": f"Give whole seconds from 0 (the old secret stops at once) "
                                                         f"to {OLD_SECRET_MAX_S} (7 days); got {value!r}."})
    return value


@audited
def rotate_app_secret(*, actor, app: App, old_secret_valid_for_s: int = OLD_SECRET_DEFAULT_S) -> tuple[App, str]:
    """A new secret. The brokers accept the old one too until `old_secret_valid_for_s` seconds from now (0: the
    old one stops as soon as the new hash lands on each cluster), then only the new one. A second rotation
    within the overlap ends the first one's old secret at once: only one previous secret is kept."""
    validate_old_secret_valid_for(old_secret_valid_for_s)
    _require_app_owner(actor, app)
    app = App.objects.select_for_update().get(pk=app.pk)
    before = snapshot(app)
    secret = new_secret()
    now = timezone.now().replace(microsecond=0)  # whole seconds: the deadline goes into ZooKeeper as such
    if old_secret_valid_for_s:
        app.previous_secret_hash = app.secret_hash
        app.previous_secret_valid_until = now + timedelta(seconds=old_secret_valid_for_s)
    else:
        app.previous_secret_hash, app.previous_secret_valid_until = "", None
    app.secret_hash = hash_secret(secret)
    app.secret_rotated_at = now
    app.revision += 1
    app.save()
    push_app(app)
    record(actor=actor, action="app.rotate_secret", obj=app, before=before, after=snapshot(app))
    return app, secret


@audited
def set_app_check_url(*, actor, app: App, check_url: str) -> App:
    """Set (or clear, with "") the URL the back-check task asks when no connection of the app can answer."""
    _require_app_owner(actor, app)
    app = App.objects.select_for_update().get(pk=app.pk)
    check_url = (check_url or "").strip()
    if app.check_url == check_url:
        return app
    if check_url:
        try:
            _, host, port, _ = outgoing.split(check_url)
        except outgoing.Refused as exc:
            raise ValidationError({"check_url": str(exc)}) from None
        if not outgoing.host_allowed(host, port, app.check_hosts):
            raise ValidationError({"check_url": (
                f"{host}:{port} is not among the hosts allowed for {app.app_id}'s check URL "
                f"({', '.join(app.check_hosts) or 'none yet'}); ask an approver to allow it first "
                f"(POST /api/v1/apps/{app.app_id}/check-hosts/).")})
    before = snapshot(app)
    app.check_url = check_url
    app.full_clean(exclude=["secret_hash"])
    app.save(update_fields=["check_url", "updated_at"])
    record(actor=actor, action="app.set_check_url", obj=app, before=before, after=snapshot(app))
    return app


_HOST = re.compile(r"^(\[[0-9a-f:.]+\]|[a-z0-9]([a-z0-9.-]{0,251}[a-z0-9])?)(:\d{1,5})?$")
MAX_CHECK_HOSTS = 20


@audited
def set_app_check_hosts(*, actor, app: App, hosts: list[str]) -> App:
    """An approver sets the hosts an app's HTTP check URL may name (`host` any port, `host:port` that port).
    The back-check calls nothing else; a check URL whose host falls off the list is no longer called."""
    require_perm(actor, "topics.approve_check_hosts")
    cleaned = list(dict.fromkeys(h.strip().lower() for h in hosts if h.strip()))
    bad = [h for h in cleaned if not _HOST.match(h) or not 0 < int(outgoing.parse_host_entry(h)[1] or 1) < 65536]
    if bad:
        raise ValidationError({"check_hosts": f"Not a host or host:port: {', '.join(bad)} "
                                              "(e.g. checks.payments.example:8443)."})
    if len(cleaned) > MAX_CHECK_HOSTS:
        raise ValidationError({"check_hosts": f"At most {MAX_CHECK_HOSTS} hosts per app."})
    app = App.objects.select_for_update().get(pk=app.pk)
    if app.check_hosts == cleaned:
        return app
    before = snapshot(app)
    app.check_hosts = cleaned
    app.save(update_fields=["check_hosts", "updated_at"])
    record(actor=actor, action="app.set_check_hosts", obj=app, before=before, after=snapshot(app))
    return app


# --- topic applications ---------------------------------------------------------------------
# The workflow is shared (apps/governance/actions.py); these name the kind for callers that know it.


def create_topic_application(*, actor, submit: bool = True, **fields) -> TopicApplication:
    """A new application: a draft, or (submit=True) straight to pending once the policy passes."""
    workflow.check_fields(fields, APPLICATION_FIELDS)
    return workflow.create(actor=actor, application=TopicApplication(**fields), submit=submit)


def update_topic_application(*, actor, application: TopicApplication, **changes) -> TopicApplication:
    return workflow.update(actor=actor, application=application, changes=changes, allowed=APPLICATION_FIELDS)


submit_topic_application = workflow.submit
withdraw_topic_application = workflow.withdraw
approve_topic_application = workflow.approve
reject_topic_application = workflow.reject


def materialize(actor, application: TopicApplication) -> None:
    """The approved application becomes a topic, expected on its cluster, pushed after commit."""
    topic = Topic(name=application.name, team=application.team, environment=application.environment,
                  cluster=application.cluster, message_types=list(application.message_types),
                  expected_peak_mps=application.expected_peak_mps, max_message_bytes=application.max_message_bytes,
                  retention_hours=application.retention_hours, storage_level=application.storage_level,
                  transactional=application.transactional, ordered=application.ordered,
                  tx_check_delay_s=application.tx_check_delay_s,
                  tx_check_interval_s=application.tx_check_interval_s, tx_check_max=application.tx_check_max,
                  description=application.description,
                  # the cluster's defaults when it is approved (a later change of the defaults moves no topic)
                  partitions=application.cluster.default_partitions,
                  replication_factor=application.cluster.default_replication_factor)
    workflow.save_created(actor, application, topic)
    provisioning.schedule_application(application)
