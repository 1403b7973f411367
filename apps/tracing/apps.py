from django.apps import AppConfig


class TracingConfig(AppConfig):
    name = "apps.tracing"
    label = "tracing"
    verbose_name = "Message tracing"
