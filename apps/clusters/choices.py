from django.db import models


class Environment(models.TextChoices):
    DEV = "dev", "Development"
    TEST = "test", "Test"
    STAGING = "staging", "Staging"
    PROD = "prod", "Production"


class StorageLevel(models.TextChoices):
    MEMORY = "memory", "Memory (fast, lost on restart)"
    FILE = "file", "File (durable, fsync group commit)"


class ClusterStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    MAINTENANCE = "maintenance", "Maintenance"
    RETIRED = "retired", "Retired"
