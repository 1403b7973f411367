from django.apps import AppConfig
from django.db.models.signals import pre_migrate

from apps.audit import checks  # noqa: F401  (registers the system checks)
from control_plane.db_roles import refuse_migrate_as_runtime


class AuditConfig(AppConfig):
    name = "apps.audit"
    label = "audit"
    verbose_name = "Audit log"

    def ready(self):
        pre_migrate.connect(refuse_migrate_as_runtime, sender=self, dispatch_uid="audit.refuse_migrate_as_runtime")
