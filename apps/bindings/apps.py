from django.apps import AppConfig


class BindingsConfig(AppConfig):
    name = "apps.bindings"
    label = "bindings"
