from django.db import models


class TxState(models.TextChoices):
    PREPARED = "prepared", "Prepared"
    COMMITTED = "committed", "Committed"
    ROLLED_BACK = "rolled_back", "Rolled back"
    UNRESOLVED = "unresolved", "Unresolved (rolled back after the last check)"


class Resolution(models.TextChoices):
    COMMIT = "commit", "Commit"
    ROLLBACK = "rollback", "Rollback"


class ResolutionSource(models.TextChoices):
    PRODUCER = "producer", "Producer (commit or rollback by itself)"
    CHECK = "check", "Back-check answer"
    EXHAUSTED = "exhausted", "Checks exhausted"
    MANUAL = "manual", "By hand"


class CheckVia(models.TextChoices):
    CONNECTION = "connection", "Producer connection (in-band)"
    HTTP = "http", "HTTP check URL"
    NONE = "none", "Nobody to ask"


class CheckAnswer(models.TextChoices):
    COMMIT = "commit", "Commit"
    ROLLBACK = "rollback", "Rollback"
    UNKNOWN = "unknown", "Unknown"


class RedriveState(models.TextChoices):
    QUEUED = "queued", "Queued"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"


class RedriveOperation(models.TextChoices):
    REDRIVE = "redrive", "Re-drive"
    DELETE = "delete", "Delete"
