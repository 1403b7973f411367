"""The runtime role (settings.SWITCHYARD_DB_RUNTIME_USER) gets ordinary DML on every table, by default privileges
for the tables later migrations create, and only INSERT and SELECT on the audit log: no UPDATE, DELETE or
TRUNCATE, whatever a compromised web or Celery process tries. Runs as the owner role (control_plane.db_roles)."""

from django.db import migrations

from control_plane.db_roles import grant_runtime_dml, revoke_runtime_dml, runtime_role


def forward(apps, schema_editor):
    grant_runtime_dml(schema_editor)
    role = runtime_role(schema_editor)
    if role is not None:
        schema_editor.execute(f"REVOKE ALL ON audit_auditrecord FROM {role}")
        schema_editor.execute(f"GRANT INSERT, SELECT ON audit_auditrecord TO {role}")


def backward(apps, schema_editor):
    revoke_runtime_dml(schema_editor)


class Migration(migrations.Migration):
    dependencies = [("audit", "0002_append_only_trigger")]
    operations = [migrations.RunPython(forward, backward)]
