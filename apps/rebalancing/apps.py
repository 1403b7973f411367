from django.apps import AppConfig


class RebalancingConfig(AppConfig):
    name = "apps.rebalancing"
    label = "rebalancing"
    verbose_name = "Rebalances"
