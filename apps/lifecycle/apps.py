from django.apps import AppConfig


class LifecycleConfig(AppConfig):
    name = "apps.lifecycle"
    label = "lifecycle"

    def ready(self):
        from apps.lifecycle import policy  # imports models: only once the app registry is loaded

        policy.register_rules()
