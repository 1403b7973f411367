from django.db import models


class TraceState(models.TextChoices):
    """What became of a message in a group (or, with no group, as a whole): docs/trace-events.md."""

    ACKED = "acked", "Acked"
    DEAD_LETTERED = "dead_lettered", "Dead-lettered"
    EXPIRED = "expired", "Expired"
    RETRYING = "retrying", "Retrying"
    IN_FLIGHT = "in_flight", "In flight"
    PENDING = "pending", "Pending"
    ROLLED_BACK = "rolled_back", "Rolled back"
    PREPARED = "prepared", "Prepared (transaction open)"
    STORED = "stored", "Stored"
    PUBLISHED = "published", "Published"


class RunState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class RunTrigger(models.TextChoices):
    SCHEDULE = "schedule", "Schedule"
    MANUAL = "manual", "Rebuild now"
