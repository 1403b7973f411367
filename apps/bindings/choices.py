from django.db import models


class SelectorKind(models.TextChoices):
    """KiteQ's bind types: which message types of the topic a group receives."""

    EXACT = "exact", "Exact message type"
    WILDCARD = "wildcard", "Wildcard (shell-style, e.g. order.*)"
    REGEX = "regex", "Regular expression (full match)"


class DeliveryMode(models.TextChoices):
    CLUSTERING = "clustering", "Clustering: one consumer of the group per message"
    BROADCAST = "broadcast", "Broadcast: every consumer of the group"


class BindingStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    RETIRED = "retired", "Retired"
