from django.apps import AppConfig


class ProvisioningConfig(AppConfig):
    """Pushing approved objects into each cluster's ZooKeeper, sync state, routing and reconciliation."""

    name = "apps.provisioning"
    label = "provisioning"
    verbose_name = "Provisioning and drift"
