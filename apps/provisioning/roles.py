"""Who may read sync state and drift, and who may reconcile and repair."""

from apps.accounts.roles import APPROVER, AUDITOR, DEVELOPER, SRE, extend

READ = ["provisioning.view_syncstate", "provisioning.view_reconcilerun"]

extend(DEVELOPER, *READ)
extend(APPROVER, *READ)
extend(SRE, *READ, "provisioning.add_reconcilerun", "provisioning.repair_drift",
       "provisioning.move_topic", "provisioning.view_placement",
       "django_celery_beat.view_periodictask", "django_celery_beat.change_periodictask")
extend(AUDITOR, *READ)
