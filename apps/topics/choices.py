from django.db import models


class TopicStatus(models.TextChoices):
    ACTIVE = "active", "Active"
    RETIRED = "retired", "Retired"  # new publishes refused; bindings drain; data kept until deleted
    DELETED = "deleted", "Deleted"  # its data is gone from every cluster; the name is free again
