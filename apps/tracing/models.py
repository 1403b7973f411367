"""The tracing index as the UI reads it: one summary row per message and its timeline of events.

The Spark job (spark_jobs.trace_index) fills these tables by COPY (spark_jobs.pg_load); nothing in the
control plane writes them. `IndexRun` records each build.
"""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models
from django.db.models import Value
from django.db.models.functions import Coalesce

from apps.tracing.choices import RunState, RunTrigger, TraceState


class TracedMessage(models.Model):
    message_id = models.CharField(max_length=64, primary_key=True)
    topic = models.CharField(max_length=255)
    message_type = models.CharField(max_length=32)
    key = models.CharField(max_length=255, null=True, blank=True)
    business_id = models.CharField(max_length=255, null=True, blank=True)
    cluster = models.CharField(max_length=63)
    app_id = models.CharField("producing app", max_length=255, null=True, blank=True)
    producer_host = models.CharField(max_length=255, null=True, blank=True)
    broker = models.CharField("store broker", max_length=255, null=True, blank=True)
    size = models.BigIntegerField(null=True, blank=True)
    first_at = models.DateTimeField()
    last_at = models.DateTimeField()
    published_at = models.DateTimeField(null=True, blank=True)
    stored_at = models.DateTimeField(null=True, blank=True)
    transaction_state = models.CharField(max_length=16, null=True, blank=True)
    final_state = models.CharField(max_length=16, choices=TraceState.choices)
    final_states = ArrayField(models.CharField(max_length=16), default=list)
    attempts = models.IntegerField(default=0)
    event_count = models.IntegerField(default=0)
    groups = models.JSONField(default=list)
    indexed_at = models.DateTimeField()

    class Meta:
        db_table = "tracing_message"
        ordering = ["-first_at", "message_id"]
        indexes = [
            models.Index(fields=["business_id"], name="tracing_msg_business_id"),
            models.Index(fields=["key"], name="tracing_msg_key"),
            models.Index(fields=["topic", "first_at"], name="tracing_msg_topic_time"),
        ]

    def __str__(self) -> str:
        return self.message_id


# A message's timeline: by time; within one microsecond by attempt (a step of no attempt, like published or
# redriven, as 0), so attempt n's outcome comes before attempt n+1's delivery; then by the kind's rank.
TIMELINE_ORDER = ("ts_us", Coalesce("attempt", Value(0)).asc(), "rank", "event_id")


class TraceEvent(models.Model):
    """One step of a message; a message's timeline is its events in TIMELINE_ORDER."""

    pk = models.CompositePrimaryKey("message_id", "event_id")
    message_id = models.CharField(max_length=64)
    event_id = models.CharField(max_length=64)
    ts_us = models.BigIntegerField()
    rank = models.SmallIntegerField()
    at = models.DateTimeField()
    event = models.CharField(max_length=16)
    group_name = models.CharField(max_length=255, null=True, blank=True)
    attempt = models.IntegerField(null=True, blank=True)
    consumer = models.CharField(max_length=255, null=True, blank=True)
    client_host = models.CharField(max_length=255, null=True, blank=True)
    broker = models.CharField(max_length=255, null=True, blank=True)
    app_id = models.CharField(max_length=255, null=True, blank=True)
    detail = models.TextField(null=True, blank=True)
    size = models.BigIntegerField(null=True, blank=True)

    class Meta:
        db_table = "tracing_event"
        ordering = ["message_id", *TIMELINE_ORDER]

    def __str__(self) -> str:
        return f"{self.message_id} {self.event}"


class IndexRun(models.Model):
    """One build of the trace index, scheduled or asked for, with its progress as the job reports it."""

    trigger = models.CharField(max_length=16, choices=RunTrigger.choices)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    state = models.CharField(max_length=16, choices=RunState.choices, default=RunState.QUEUED)
    stage = models.CharField(max_length=200, blank=True)
    percent = models.IntegerField(default=0)
    new_files = models.IntegerField(null=True, blank=True)
    new_events = models.BigIntegerField(null=True, blank=True)
    messages = models.BigIntegerField(null=True, blank=True)
    error = models.TextField(blank=True)
    steps = models.JSONField(default=list)
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        db_table = "tracing_index_run"
        ordering = ["-id"]
        permissions = [
            ("start_indexrun", "Can start a trace index build now"),
            ("change_index_schedule", "Can change the trace index schedule"),
        ]

    def __str__(self) -> str:
        return f"index run #{self.pk} ({self.state})"

    @property
    def active(self) -> bool:
        return self.state in (RunState.QUEUED, RunState.RUNNING)
