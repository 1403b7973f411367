"""A topic's move from one cluster to another (docs/migration.md): the move and each of its steps, as the
worker recorded them. Only apps.moves.actions and apps.moves.runner write these rows."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Q
from django.urls import reverse

from apps.clusters.models import Cluster
from apps.moves.choices import ACTIVE_STATES, OPEN_STATES, DeadLetters, MoveState, Step, StepState
from apps.topics.models import Topic
from control_plane.leases import LeasedRow

FOLLOW_S_RANGE = (1, 60)


class TopicMove(LeasedRow):
    """Move `topic` from `source` to `target` while its clients keep running; or roll that back."""

    topic = models.ForeignKey(Topic, on_delete=models.PROTECT, related_name="moves")
    source = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    target = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    dead_letters = models.CharField(max_length=16, choices=DeadLetters.choices,
                                    help_text="What happens to the source's dead letters once it is drained.")
    client_follow_s = models.PositiveSmallIntegerField(
        "seconds clients get to follow a route change", default=5,
        validators=[MinValueValidator(FOLLOW_S_RANGE[0]), MaxValueValidator(FOLLOW_S_RANGE[1])],
        help_text="After each route change has landed on every cluster, the move waits this long before relying "
                  "on it (the SDK follows within 5 s).")
    state = models.CharField(max_length=16, choices=MoveState.choices, default=MoveState.RUNNING, db_index=True)
    step = models.CharField(max_length=24, choices=Step.choices, default=Step.PROVISION,
                            help_text="The step under way (the last one once the move has ended).")
    error = models.TextField(blank=True, help_text="Why the move failed (a failed move can be resumed or rolled back).")
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    requested_as = models.CharField(max_length=150, help_text="who started it (a user or a system actor)")
    rollback_requested_by = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        permissions = [("rollback_topicmove", "Roll back or resume a topic move")]
        constraints = [
            models.UniqueConstraint(fields=["topic"], condition=Q(state__in=[s.value for s in OPEN_STATES]),
                                    name="topicmove_one_open_per_topic"),
            models.CheckConstraint(condition=~Q(source=models.F("target")), name="topicmove_source_is_not_target"),
        ]

    def __str__(self) -> str:
        return f"move #{self.pk} of {self.topic.name} {self.source.name} → {self.target.name} ({self.state})"

    def get_absolute_url(self):
        return reverse("moves:detail", args=[self.pk])

    @property
    def active(self) -> bool:
        return self.state in ACTIVE_STATES

    @property
    def open(self) -> bool:
        return self.state in OPEN_STATES


class MoveStep(models.Model):
    """One step of a move: its state, attempts, last error and the figures it last read (`progress`)."""

    move = models.ForeignKey(TopicMove, on_delete=models.CASCADE, related_name="steps")
    name = models.CharField(max_length=24, choices=Step.choices)
    position = models.PositiveSmallIntegerField()
    state = models.CharField(max_length=16, choices=StepState.choices, default=StepState.PENDING)
    attempts = models.PositiveIntegerField(default=0, help_text="runs that ended in an error (then retried)")
    progress = models.JSONField(default=dict, blank=True, help_text="the figures the step last read")
    summary = models.CharField(max_length=300, blank=True, help_text="the progress in words")
    error = models.TextField(blank=True, help_text="the last error (the step is retried with backoff)")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["move_id", "position"]
        constraints = [models.UniqueConstraint(fields=["move", "name"], name="movestep_unique_step")]

    def __str__(self) -> str:
        return f"{self.get_name_display()}: {self.state}"
