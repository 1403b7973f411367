from django.apps import AppConfig


class AlertsConfig(AppConfig):
    name = "apps.alerts"
    label = "alerts"
    verbose_name = "Alarms: rules, notifications, silences"
