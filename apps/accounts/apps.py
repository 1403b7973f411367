from django.apps import AppConfig
from django.db.models.signals import post_migrate


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Users, roles and teams"

    def ready(self):
        # These import models: only once the app registry is loaded.
        from apps.accounts import lockouts, schema  # noqa: F401  (the lock-out audit receiver, the token scheme)
        from apps.accounts.roles import sync_role_groups

        post_migrate.connect(sync_role_groups, dispatch_uid="switchyard_sync_role_groups")
