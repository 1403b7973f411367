"""Alarm rules (rendered into Prometheus rules and Alertmanager routes) and the alerts Alertmanager reported."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.alerts.choices import AlertStatus, RuleKind
from apps.clusters.models import Cluster
from apps.topics.models import Topic


class AlertRule(models.Model):
    """One alarm: `kind` on a cluster (optionally one topic and consumer group) past `threshold` for
    `for_seconds`, notified to its webhooks and e-mail addresses. Changed only through apps.alerts.actions."""

    name = models.CharField(max_length=100, help_text="Shown in notifications; unique per cluster.")
    kind = models.CharField(max_length=24, choices=RuleKind.choices)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    topic = models.ForeignKey(Topic, on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    group = models.CharField(max_length=200, blank=True, help_text="Consumer group (lag, backlog, consumers).")
    threshold = models.FloatField()
    for_seconds = models.PositiveIntegerField(default=60, help_text="How long the condition holds before it fires.")
    webhook_urls = models.JSONField(default=list, blank=True)
    emails = models.JSONField(default=list, blank=True)
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster__name", "name"]
        constraints = [models.UniqueConstraint(fields=["cluster", "name"], name="alertrule_unique_name_per_cluster")]
        permissions = [("manage_any_alertrule", "Add, change and remove alarm rules of any cluster and topic")]

    def __str__(self) -> str:
        return f"{self.name} ({self.cluster.name})"


class AlertEvent(models.Model):
    """An alert as Alertmanager last notified it (firing, then resolved): the console's history."""

    fingerprint = models.CharField(max_length=32)
    starts_at = models.DateTimeField()
    ends_at = models.DateTimeField(null=True, blank=True)
    status = models.CharField(max_length=16, choices=AlertStatus.choices)
    alertname = models.CharField(max_length=200)
    rule = models.ForeignKey(AlertRule, null=True, blank=True, on_delete=models.SET_NULL, related_name="events")
    cluster = models.CharField(max_length=200, blank=True)
    labels = models.JSONField(default=dict)
    annotations = models.JSONField(default=dict)
    first_notified_at = models.DateTimeField(auto_now_add=True)
    last_notified_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["-starts_at"]
        constraints = [models.UniqueConstraint(fields=["fingerprint", "starts_at"], name="alertevent_unique")]
        permissions = [("silence_alertevent", "Create and expire silences in Alertmanager")]

    def __str__(self) -> str:
        return f"{self.alertname} {self.status} since {self.starts_at:%Y-%m-%d %H:%M:%S}"
