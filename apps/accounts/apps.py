from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "apps.accounts"
    label = "accounts"
    verbose_name = "Users, roles and teams"

    def ready(self):
        from django.db.models.signals import post_migrate

        from apps.accounts.roles import sync_role_groups

        post_migrate.connect(sync_role_groups, dispatch_uid="switchyard_sync_role_groups")
        from apps.accounts import lockouts, schema  # noqa: F401  (the lock-out audit receiver, the token scheme)
