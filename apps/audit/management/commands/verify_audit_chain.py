"""The former name of `audit_verify`, kept so scripts that call it keep working."""

from apps.audit.management.commands.audit_verify import Command as AuditVerify


class Command(AuditVerify):
    help = "Same as `manage.py audit_verify`. " + AuditVerify.help
