from django.core.exceptions import ValidationError
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models

from apps.accounts.models import slug_validator
from apps.clusters.choices import ClusterStatus, Environment, StorageLevel

zk_connect_validator = RegexValidator(
    # host names of labels of 1-63 characters (what DNS and the idna codec take), each with a port
    r"^(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?:\d{1,5}"
    r"(?:,(?:[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?:\d{1,5})*$",
    "Give host:port pairs separated by commas, e.g. zk1:2181,zk2:2181 (no chroot here).",
)


def validate_zk_ports(value: str) -> None:
    """Every port of a connect string within 1-65535 (the pattern above only says digits)."""
    bad = [pair for pair in str(value).split(",") if pair.rpartition(":")[2].isdigit()
           and not 1 <= int(pair.rpartition(":")[2]) <= 65535]
    if bad:
        raise ValidationError(f"Ports are 1-65535: {', '.join(bad)} is not a reachable ZooKeeper address.")


zk_chroot_validator = RegexValidator(
    r"^(/[A-Za-z0-9._-]+)+$",
    "Give an absolute ZooKeeper path such as /switchyard/prod-a, without a trailing slash.",
)


class Cluster(models.Model):
    """A broker cluster: one ZooKeeper ensemble (under a chroot) and the broker nodes it lists."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    environment = models.CharField(max_length=16, choices=Environment.choices)
    region = models.CharField(max_length=63, validators=[slug_validator])
    zk_connect = models.CharField("ZooKeeper connect string", max_length=500, validators=[zk_connect_validator, validate_zk_ports])
    zk_chroot = models.CharField("ZooKeeper chroot", max_length=200, validators=[zk_chroot_validator])
    storage_level = models.CharField(max_length=16, choices=StorageLevel.choices, default=StorageLevel.FILE)
    description = models.TextField(blank=True)
    status = models.CharField(max_length=16, choices=ClusterStatus.choices, default=ClusterStatus.ACTIVE)
    repair_drift = models.BooleanField(
        "repair drift automatically", default=False,
        help_text="When the periodic reconcile finds ZooKeeper differing from the platform (a node changed, "
                  "added or removed by hand, or its ACL), write the platform's state back: desired state wins.")
    backcheck_allow_private = models.BooleanField(
        "back-checks may call private addresses", default=False,
        help_text="Let HTTP back-checks of this cluster's apps call private and loopback addresses (10/8, 172.16/12, "
                  "192.168/16, 100.64/10, 127/8, fc00::/7, ::1). Link-local addresses are never called.")
    default_partitions = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(64)],
        help_text="Partitions of a topic that does not set its own (1-64).")
    default_replication_factor = models.PositiveSmallIntegerField(
        default=1, validators=[MinValueValidator(1), MaxValueValidator(3)],
        help_text="Brokers holding each partition of a topic that does not set its own (1-3).")
    min_insync = models.PositiveSmallIntegerField(
        "minimum in sync", default=1, validators=[MinValueValidator(1), MaxValueValidator(3)],
        help_text="Replicas (the leader included) that must have stored a message before it is acknowledged.")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["environment", "name"]
        constraints = [
            models.UniqueConstraint(fields=["zk_connect", "zk_chroot"], name="cluster_unique_zk_location"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def zk_hosts(self) -> str:
        """The connect string with the chroot, as kazoo takes it."""
        return f"{self.zk_connect}{self.zk_chroot}"
