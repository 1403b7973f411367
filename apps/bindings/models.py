"""Bindings (a consumer group's subscription to a topic), producer grants, and their applications."""

from __future__ import annotations

import fnmatch
import re

from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.urls import reverse

from apps.bindings.choices import BindingStatus, DeliveryMode, OnFailure, SelectorKind
from apps.governance.workflow import ApplicationBase, DecisionBase
from apps.topics.models import App, Topic

group_validator = RegexValidator(
    r"^[a-z][a-z0-9_-]{1,62}$",
    "Use 2–63 characters: lowercase letters, digits, '_' and '-', starting with a letter.",
)


def selector_error(kind: str, pattern: str) -> str | None:
    """Why (kind, pattern) is not a usable selector, in words; None when it is."""
    if not pattern:
        return "Give a pattern (use the wildcard * to receive every message type)."
    if len(pattern) > 200:
        return "Keep the pattern under 200 characters."
    if kind == SelectorKind.REGEX:
        try:
            re.compile(pattern)
        except re.error as exc:
            return f"Not a valid regular expression: {exc}."
    elif kind == SelectorKind.WILDCARD:
        re.compile(fnmatch.translate(pattern))
    elif kind == SelectorKind.EXACT and any(c in pattern for c in "*?[]"):
        return "An exact selector names one message type; for patterns choose wildcard."
    return None


def selector_matches(kind: str, pattern: str, message_type: str) -> bool:
    if kind == SelectorKind.EXACT:
        return message_type == pattern
    if kind == SelectorKind.WILDCARD:
        return fnmatch.fnmatchcase(message_type, pattern)
    return re.fullmatch(pattern, message_type) is not None


class SubscriptionSettings(models.Model):
    """What a subscription is: the fields a binding application asks for and a binding carries."""

    topic = models.ForeignKey(Topic, on_delete=models.PROTECT, related_name="+")
    app = models.ForeignKey(App, on_delete=models.PROTECT, related_name="+", verbose_name="consumer app")
    group = models.CharField("consumer group", max_length=63, validators=[group_validator])
    selector_kind = models.CharField("selector", max_length=16, choices=SelectorKind.choices,
                                     default=SelectorKind.WILDCARD)
    selector_pattern = models.CharField("message-type pattern", max_length=200, default="*")
    mode = models.CharField("delivery mode", max_length=16, choices=DeliveryMode.choices,
                            default=DeliveryMode.CLUSTERING)
    delivery_limit = models.PositiveIntegerField(
        default=16, validators=[MinValueValidator(1), MaxValueValidator(100)],
        help_text="Deliveries before a message goes to the group's dead-letter queue.")
    ttl_s = models.PositiveIntegerField(
        "TTL (seconds)", default=86400, validators=[MinValueValidator(1), MaxValueValidator(30 * 86400)],
        help_text="A message not acknowledged this long after it was stored goes to the dead-letter queue.")
    backoff_initial_ms = models.PositiveIntegerField(
        "first retry after (ms)", default=1000, validators=[MinValueValidator(10), MaxValueValidator(3_600_000)])
    backoff_max_ms = models.PositiveIntegerField(
        "longest retry wait (ms)", default=60_000, validators=[MinValueValidator(10), MaxValueValidator(3_600_000)])
    backoff_multiplier = models.FloatField(
        "retry backoff multiplier", default=2.0, validators=[MinValueValidator(1.0), MaxValueValidator(10.0)])
    max_in_flight = models.PositiveIntegerField(
        "max in flight per consumer", default=32, validators=[MinValueValidator(1), MaxValueValidator(10_000)],
        help_text="Unacknowledged messages one consumer holds at most (flow control).")
    on_failure = models.CharField(
        "on failure (ordered topics)", max_length=16, choices=OnFailure.choices, default=OnFailure.BLOCK,
        help_text="Ordered topics only: block the key until its message is acknowledged, or dead-letter the message "
                  "at the delivery limit and let the key's next message go.")

    class Meta:
        abstract = True

    def clean(self):
        super().clean()
        errors = {}
        message = selector_error(self.selector_kind, self.selector_pattern or "")
        if message:
            errors["selector_pattern"] = message
        if self.backoff_initial_ms and self.backoff_max_ms and self.backoff_initial_ms > self.backoff_max_ms:
            errors["backoff_max_ms"] = "The longest retry wait cannot be shorter than the first one."
        if errors:
            raise ValidationError(errors)


class Binding(SubscriptionSettings):
    """An approved subscription; what ZooKeeper should hold under /bindings/<topic>/<group>."""

    description = models.TextField(blank=True)
    revision = models.PositiveIntegerField(default=1, editable=False)
    status = models.CharField(max_length=16, choices=BindingStatus.choices, default=BindingStatus.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["topic__name", "group"]
        permissions = [("drop_backlog", "Drop a retired topic's binding with the backlog it still holds")]
        # a removed (retired) binding frees its group: it may be bound again
        constraints = [models.UniqueConstraint(fields=["topic", "group"], condition=models.Q(status=BindingStatus.ACTIVE),
                                               name="binding_unique_active_group_per_topic")]

    def __str__(self) -> str:
        return f"{self.topic.name} → {self.group}"

    def get_absolute_url(self):
        return reverse("bindings:detail", args=[self.pk])


class AppOnTopicApplication(ApplicationBase):
    """An application of an app's team for something on another team's topic (a binding, a producer grant):
    the app's team applies, the topic owner's team approves, it lands on the topic's cluster."""

    team_lookup = "topic__team_id"
    list_related = ("topic__team", "topic__cluster", "app", "applicant")

    class Meta(ApplicationBase.Meta):
        abstract = True

    def applying_teams(self):
        return [self.app.team], "app"

    def approving_team(self):
        return self.topic.team

    def target_cluster(self):
        return self.topic.cluster


class BindingApplication(SubscriptionSettings, AppOnTopicApplication):
    """A request to subscribe a consumer group to a topic; the topic owner's team approves."""

    kind = "binding"
    prefix = "B"
    approve_perm = "bindings.approve_bindingapplication"
    fields_asked = ("topic", "app", "group", "selector_kind", "selector_pattern", "mode", "delivery_limit", "ttl_s",
                    "backoff_initial_ms", "backoff_max_ms", "backoff_multiplier", "max_in_flight", "on_failure",
                    "description", "reason")
    materializer = "apps.bindings.actions.materialize_binding"
    url_name = "bindings:application"

    binding = models.OneToOneField(Binding, null=True, blank=True, on_delete=models.PROTECT,
                                   related_name="application", editable=False)

    class Meta(AppOnTopicApplication.Meta):
        permissions = [("approve_bindingapplication", "Approve or reject bindings to one's team's topics")]

    def summary(self) -> str:
        topic = self.topic.name if self.topic_id else "?"
        return f"binding {topic} → {self.group}"

    def provisioned_object(self):
        return self.binding


class BindingDecision(DecisionBase):
    application = models.ForeignKey(BindingApplication, on_delete=models.CASCADE, related_name="decisions")


class ProducerGrant(models.Model):
    """An app's right to publish on a topic; what ZooKeeper should hold under /grants/<topic>/<app-id>."""

    topic = models.ForeignKey(Topic, on_delete=models.PROTECT, related_name="grants")
    app = models.ForeignKey(App, on_delete=models.PROTECT, related_name="grants")
    revision = models.PositiveIntegerField(default=1, editable=False)
    status = models.CharField(max_length=16, choices=BindingStatus.choices, default=BindingStatus.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["topic__name", "app__app_id"]
        constraints = [models.UniqueConstraint(fields=["topic", "app"], condition=models.Q(status=BindingStatus.ACTIVE),
                                               name="grant_unique_active_app_per_topic")]

    def __str__(self) -> str:
        return f"{self.app.app_id} → {self.topic.name}"


class GrantApplication(AppOnTopicApplication):
    """A request that a producing app may publish on a topic; the topic owner's team approves."""

    kind = "grant"
    prefix = "G"
    approve_perm = "bindings.approve_grantapplication"
    fields_asked = ("topic", "app", "description", "reason")
    materializer = "apps.bindings.actions.materialize_grant"
    url_name = "bindings:grant-application"

    topic = models.ForeignKey(Topic, on_delete=models.PROTECT, related_name="+")
    app = models.ForeignKey(App, on_delete=models.PROTECT, related_name="+", verbose_name="producer app")
    grant = models.OneToOneField(ProducerGrant, null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="application", editable=False)

    class Meta(AppOnTopicApplication.Meta):
        permissions = [("approve_grantapplication", "Approve or reject producer grants on one's team's topics")]

    def summary(self) -> str:
        app = self.app.app_id if self.app_id else "?"
        topic = self.topic.name if self.topic_id else "?"
        return f"grant {app} → {topic}"

    def provisioned_object(self):
        return self.grant


class GrantDecision(DecisionBase):
    application = models.ForeignKey(GrantApplication, on_delete=models.CASCADE, related_name="decisions")
