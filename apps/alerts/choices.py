from django.db import models


class RuleKind(models.TextChoices):
    """What an alarm rule watches; each kind's threshold means one thing (docs/alerts.md)."""

    LAG_AGE = "lag_age", "Oldest waiting message older than (seconds)"
    BACKLOG = "backlog", "Backlog larger than (messages)"
    NO_CONSUMERS = "no_consumers", "Fewer consumers than (consumers)"
    AUTH_FAILURES = "auth_failures", "Authentication failures in 5 minutes above"
    UNRESOLVED_TX = "unresolved_tx", "Unresolved transaction messages above"
    BROKER_DOWN = "broker_down", "Fewer live brokers than"
    ZOOKEEPER_DRIFT = "zookeeper_drift", "ZooKeeper nodes drifted above"
    UNDER_REPLICATED = "under_replicated", "Under-replicated partitions above"


# kinds that watch a topic (and, for the first three, a consumer group); the rest watch a whole cluster
TOPIC_KINDS = {RuleKind.LAG_AGE, RuleKind.BACKLOG, RuleKind.NO_CONSUMERS, RuleKind.UNRESOLVED_TX}
GROUP_KINDS = {RuleKind.LAG_AGE, RuleKind.BACKLOG, RuleKind.NO_CONSUMERS}
DEFAULT_THRESHOLDS = {RuleKind.NO_CONSUMERS: 1, RuleKind.BROKER_DOWN: 1}


class AlertStatus(models.TextChoices):
    FIRING = "firing", "Firing"
    RESOLVED = "resolved", "Resolved"
