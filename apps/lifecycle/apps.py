from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "apps.lifecycle"
    label = "lifecycle"

    def ready(self):
        from apps.lifecycle import policy

        policy.register_rules()
