"""Prepared (half) messages the back-check sweep has seen, every check it made, and dead-letter re-drives.

The brokers hold the messages; these tables are the control plane's record of what it saw, asked and
decided (docs/transactions.md).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from apps.clusters.models import Cluster
from apps.transactions.choices import (
    CheckAnswer,
    CheckVia,
    RedriveOperation,
    RedriveState,
    Resolution,
    ResolutionSource,
    TxState,
)


class PreparedMessage(models.Model):
    """One prepared message on one broker of a cluster, from the first sweep that saw it to its outcome."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    broker = models.CharField("broker node", max_length=255)
    message_id = models.CharField(max_length=64)
    topic = models.CharField(max_length=255)
    app_id = models.CharField("producing app", max_length=255)
    message_type = models.CharField(max_length=64, blank=True)
    key = models.CharField(max_length=255, null=True, blank=True)
    business_id = models.CharField(max_length=255, null=True, blank=True)
    prepared_at = models.DateTimeField()
    state = models.CharField(max_length=16, choices=TxState.choices, default=TxState.PREPARED)
    checks_done = models.PositiveIntegerField(default=0)
    next_check_at = models.DateTimeField(null=True, blank=True)
    # a check task holds the message until then (set by the sweep's claim, cleared by the task)
    claimed_until = models.DateTimeField(null=True, blank=True)
    resolution = models.CharField(max_length=16, choices=Resolution.choices, blank=True)
    resolution_source = models.CharField(max_length=16, choices=ResolutionSource.choices, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    first_seen_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "transactions_prepared_message"
        ordering = ["prepared_at", "message_id"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "message_id"], name="tx_prepared_unique_per_cluster"),
        ]
        indexes = [
            models.Index(fields=["state", "next_check_at"], name="tx_prepared_due"),
            models.Index(fields=["cluster", "broker", "state"], name="tx_prepared_broker_state"),
            models.Index(fields=["topic", "app_id", "state"], name="tx_prepared_topic_app"),
        ]
        permissions = [("resolve_preparedmessage", "Can commit or roll back a prepared message by hand")]

    def __str__(self) -> str:
        return f"{self.message_id} ({self.state})"


class TxCheck(models.Model):
    """One back-check of a prepared message: whom it asked, how, what came back, how long it took."""

    message = models.ForeignKey(PreparedMessage, on_delete=models.CASCADE, related_name="checks")
    at = models.DateTimeField()
    via = models.CharField(max_length=16, choices=CheckVia.choices)
    answer = models.CharField(max_length=16, choices=CheckAnswer.choices)
    connection = models.CharField(max_length=255, blank=True)
    error = models.TextField(blank=True)
    duration_ms = models.PositiveIntegerField(default=0)

    class Meta:
        db_table = "transactions_check"
        ordering = ["message_id", "at", "id"]

    def __str__(self) -> str:
        return f"check of {self.message_id} via {self.via}: {self.answer}"


class Redrive(models.Model):
    """A request to deliver dead letters of one group again (or to delete them), and its progress."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    topic = models.CharField(max_length=255)
    group = models.CharField(max_length=63)
    operation = models.CharField(max_length=16, choices=RedriveOperation.choices, default=RedriveOperation.REDRIVE)
    since = models.DateTimeField(null=True, blank=True)
    until = models.DateTimeField(null=True, blank=True)
    # with no ids: every dead letter the broker lists for these filters (message_type, key, business_id)
    filters = models.JSONField(default=dict, blank=True)
    message_ids = models.JSONField(default=list, blank=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    state = models.CharField(max_length=16, choices=RedriveState.choices, default=RedriveState.QUEUED)
    total = models.PositiveIntegerField(default=0, help_text="dead letters selected so far")
    done = models.PositiveIntegerField(default=0, help_text="re-driven (or deleted) by this run")
    skipped = models.PositiveIntegerField(default=0, help_text="re-driven before, or no longer dead-lettered")
    batches = models.PositiveIntegerField(default=0)
    error = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    # the task running it was alive then (set at each batch); an old one means its worker died: resumed
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "transactions_redrive"
        ordering = ["-id"]
        permissions = [("browse_deadletters", "Can browse dead letters with their message bodies"),
                       ("manage_deadletters", "Can re-drive, delete and copy dead letters and reset a group's "
                                              "position (SREs: any topic; developers: their team's topics)")]

    def __str__(self) -> str:
        return f"{self.get_operation_display().lower()} #{self.pk} {self.topic}/{self.group} ({self.state})"

    @property
    def active(self) -> bool:
        return self.state in (RedriveState.QUEUED, RedriveState.RUNNING)


class RedrivenMessage(models.Model):
    """A dead letter that has been re-driven to its group once; never sent again by a later run."""

    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    topic = models.CharField(max_length=255)
    group = models.CharField(max_length=63)
    message_id = models.CharField(max_length=64)
    redrive = models.ForeignKey(Redrive, on_delete=models.PROTECT, related_name="messages")
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "transactions_redriven_message"
        constraints = [
            models.UniqueConstraint(fields=["cluster", "topic", "group", "message_id"], name="tx_redriven_once"),
        ]

    def __str__(self) -> str:
        return f"{self.message_id} → {self.topic}/{self.group}"
