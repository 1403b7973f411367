"""Apps (the credentials producers and consumers connect with), topics, and topic applications."""

from __future__ import annotations

import re
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.urls import reverse

from apps.accounts.models import Team, slug_validator
from apps.clusters.choices import Environment, StorageLevel
from apps.clusters.models import Cluster
from apps.governance.workflow import ApplicationBase, DecisionBase
from apps.topics.choices import TopicStatus
from broker_core.auth import is_legacy

# The shape a name must have to be a ZooKeeper path segment; the naming *policy* is stricter.
topic_name_validator = RegexValidator(
    r"^[A-Za-z0-9][A-Za-z0-9._-]{0,118}[A-Za-z0-9]$",
    "Use 2–120 letters, digits, '.', '_' or '-', starting and ending with a letter or digit.",
)
MESSAGE_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_MESSAGE_TYPES = 50
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
TX_CHECK_DEFAULTS = {"delay_s": 6, "interval_s": 30, "max_checks": 15}
TX_CHECK_LIMITS = {"delay_s": 3600, "interval_s": 3600, "max_checks": 100}


def validate_message_types(value) -> None:
    if not isinstance(value, list) or not value:
        raise ValidationError("Give at least one message type, e.g. created, paid.")
    if len(value) > MAX_MESSAGE_TYPES:
        raise ValidationError(f"At most {MAX_MESSAGE_TYPES} message types per topic.")
    bad = [str(v) for v in value if not isinstance(v, str) or not MESSAGE_TYPE_RE.match(v)]
    if bad:
        raise ValidationError(
            f"Not a valid message type: {', '.join(bad)} (use letters, digits, '.', '_' or '-', up to 64).")
    if len(set(value)) != len(value):
        raise ValidationError("Each message type once.")


class TopicSettings(models.Model):
    """What a topic is: the fields a topic application asks for and a topic carries."""

    name = models.CharField(max_length=120, validators=[topic_name_validator])
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="+",
                             help_text="The team that owns the topic and approves who may use it.")
    environment = models.CharField(max_length=16, choices=Environment.choices)
    cluster = models.ForeignKey(Cluster, on_delete=models.PROTECT, related_name="+")
    message_types = models.JSONField(validators=[validate_message_types],
                                     help_text="The message types published on this topic.")
    expected_peak_mps = models.PositiveIntegerField(
        "expected peak messages/s", validators=[MinValueValidator(1), MaxValueValidator(1_000_000)])
    max_message_bytes = models.PositiveIntegerField(
        "maximum message size (bytes)", default=65536,
        validators=[MinValueValidator(64), MaxValueValidator(MAX_MESSAGE_BYTES)])
    retention_hours = models.PositiveIntegerField(
        default=72, validators=[MinValueValidator(1), MaxValueValidator(24 * 30)],
        help_text="How long stored messages are kept (1 hour to 30 days).")
    storage_level = models.CharField(max_length=16, choices=StorageLevel.choices, default=StorageLevel.FILE)
    transactional = models.BooleanField(default=False, help_text="Producers send two-phase (half) messages.")
    ordered = models.BooleanField(default=False, help_text="Per-key order is kept for consumers.")
    # Back-checks of prepared (half) messages; only transactional topics use them. RocketMQ's defaults.
    tx_check_delay_s = models.PositiveIntegerField(
        "first back-check after (s)", default=TX_CHECK_DEFAULTS["delay_s"],
        validators=[MinValueValidator(1), MaxValueValidator(TX_CHECK_LIMITS["delay_s"])],
        help_text="A prepared message neither committed nor rolled back is first checked this long after it was "
                  "prepared.")
    tx_check_interval_s = models.PositiveIntegerField(
        "back-check interval (s)", default=TX_CHECK_DEFAULTS["interval_s"],
        validators=[MinValueValidator(1), MaxValueValidator(TX_CHECK_LIMITS["interval_s"])],
        help_text="The wait between back-checks answered unknown or not answered (doubling, up to 4 times this).")
    tx_check_max = models.PositiveIntegerField(
        "maximum back-checks", default=TX_CHECK_DEFAULTS["max_checks"],
        validators=[MinValueValidator(1), MaxValueValidator(TX_CHECK_LIMITS["max_checks"])],
        help_text="After this many unanswered checks the message is rolled back and reported unresolved.")

    class Meta:
        abstract = True

    @property
    def tx_check(self) -> dict:
        return {"delay_s": self.tx_check_delay_s, "interval_s": self.tx_check_interval_s,
                "max_checks": self.tx_check_max}


class App(models.Model):
    """A producer or consumer identity of a team: the app id and secret its clients connect with."""

    app_id = models.CharField("app id", max_length=63, unique=True, validators=[slug_validator])
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="apps")
    description = models.TextField(blank=True)
    secret_hash = models.CharField(max_length=200, editable=False)
    secret_rotated_at = models.DateTimeField(null=True, blank=True, editable=False)
    # the secret before the last rotation, accepted by the brokers until `previous_secret_valid_until`
    previous_secret_hash = models.CharField(max_length=200, blank=True, default="", editable=False)
    previous_secret_valid_until = models.DateTimeField(null=True, blank=True, editable=False)
    active = models.BooleanField(default=True)
    check_url = models.URLField(
        "HTTP check URL", max_length=500, blank=True, default="",
        help_text="Asked about a prepared message of this app when no connection of it can answer a back-check: "
                  "POST JSON, answer {\"state\": \"commit\" | \"rollback\" | \"unknown\"}.")
    # hosts the check URL may name ("host" any port, "host:port" that port): set by an approver
    check_hosts = models.JSONField("allowed check hosts", default=list, blank=True, editable=False)
    revision = models.PositiveIntegerField(default=1, editable=False)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["app_id"]
        permissions = [("approve_check_hosts", "Can set the hosts an app's HTTP check URL may name")]

    def __str__(self) -> str:
        return self.app_id

    @property
    def secret_hash_is_legacy(self) -> bool:
        """A PBKDF2 hash from before the HMAC scheme: it works, at a PBKDF2 check per connection, until rotated."""
        return is_legacy(self.secret_hash)


class Topic(TopicSettings):
    """An approved topic; what ZooKeeper should hold under /topics/<name> of its cluster."""

    description = models.TextField(blank=True)
    revision = models.PositiveIntegerField(default=1, editable=False)
    status = models.CharField(max_length=16, choices=TopicStatus.choices, default=TopicStatus.ACTIVE)
    # grows by one on every change of where clients send and subscribe (docs/routing.md)
    route_version = models.PositiveIntegerField(default=1, editable=False)
    retired_at = models.DateTimeField(null=True, blank=True, editable=False,
                                      help_text="When it was retired: its data goes retention_hours after this, "
                                                "once its bindings have drained.")
    deleted_at = models.DateTimeField(null=True, blank=True, editable=False)
    # issue 20: set from the cluster's defaults when the topic is approved; empty (a topic from before) takes the
    # cluster's default (Cluster.default_partitions / default_replication_factor)
    partitions = models.PositiveSmallIntegerField(null=True, blank=True,
                                                  validators=[MinValueValidator(1), MaxValueValidator(64)])
    replication_factor = models.PositiveSmallIntegerField(null=True, blank=True,
                                                          validators=[MinValueValidator(1), MaxValueValidator(3)])
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["environment", "name"]
        constraints = [
            # a deleted topic's name is free again; an active or retired one holds it
            models.UniqueConstraint(fields=["name", "environment"], condition=~models.Q(status=TopicStatus.DELETED),
                                    name="topic_unique_live_name_per_environment"),
        ]

    def __str__(self) -> str:
        return self.name

    def get_absolute_url(self):
        return reverse("topics:detail", args=[self.pk])

    @property
    def retention_s(self) -> int:
        return self.retention_hours * 3600

    @property
    def partition_count(self) -> int:
        """Its partitions: its own, else its cluster's default."""
        return self.partitions or self.cluster.default_partitions

    @property
    def replicas(self) -> int:
        """Its replication factor: its own, else its cluster's default."""
        return self.replication_factor or self.cluster.default_replication_factor

    @property
    def data_deleted_after(self):
        """A retired topic's data (and name) is kept at least until then."""
        return self.retired_at + timedelta(hours=self.retention_hours) if self.retired_at else None


class TopicApplication(TopicSettings, ApplicationBase):
    """A developer's request for a new topic, through policy and approval to provisioning."""

    kind = "topic"
    prefix = "T"
    approve_perm = "topics.approve_topicapplication"
    list_related = ("team", "cluster", "applicant")
    fields_asked = ("name", "team", "environment", "cluster", "message_types", "expected_peak_mps",
                    "max_message_bytes", "retention_hours", "storage_level", "transactional", "ordered",
                    "tx_check_delay_s", "tx_check_interval_s", "tx_check_max", "description", "reason")
    materializer = "apps.topics.actions.materialize"
    url_name = "topics:application"

    topic = models.OneToOneField(Topic, null=True, blank=True, on_delete=models.PROTECT,
                                 related_name="application", editable=False)

    class Meta(ApplicationBase.Meta):
        permissions = [
            ("approve_topicapplication", "Approve or reject topic applications of one's team"),
            ("approve_production", "Approve applications for production clusters as SRE"),
        ]

    def summary(self) -> str:
        return f"topic {self.name} ({self.environment})"

    def approving_team(self):
        return self.team

    def target_cluster(self):
        return self.cluster

    def provisioned_object(self):
        return self.topic


class TopicDecision(DecisionBase):
    application = models.ForeignKey(TopicApplication, on_delete=models.CASCADE, related_name="decisions")
