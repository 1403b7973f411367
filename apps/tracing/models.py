"""The tracing index as the UI reads it: one row per message, its summary and its timeline of events.

The Spark job (spark_jobs.trace_index) fills the table by COPY (spark_jobs.pg_load); nothing in the
control plane writes it. `IndexRun` records each build.
"""

from django.conf import settings
from django.contrib.postgres.fields import ArrayField
from django.db import models

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
    # its events as a JSON array of objects (the index's timeline fields, nulls left out), read with
    # queries.timeline_of: text, not jsonb, since nothing in the database looks inside it and a load
    # would parse millions of events for nothing
    timeline = models.TextField(default="[]")
    indexed_at = models.DateTimeField()

    class Meta:
        db_table = "tracing_message"
        ordering = ["-first_at", "message_id"]
        indexes = [
            models.Index(fields=["business_id"], name="tracing_msg_business_id"),
            models.Index(fields=["key"], name="tracing_msg_key"),
            models.Index(fields=["topic", "first_at"], name="tracing_msg_topic_time"),
        ]
        # view_tracedmessage alone: messages of topics one's teams own (queries.visible_messages)
        permissions = [("trace_all_topics", "Can trace messages of every team's topic")]

    def __str__(self) -> str:
        return self.message_id


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
