"""Spark's load (spark_jobs/pg_load.py) connects as the runtime role and empties the two staging tables with
TRUNCATE before and after each load: that role may truncate these two, and no other table."""

from django.db import migrations

from control_plane.db_roles import runtime_role

STAGING = "tracing_message_staging, tracing_event_staging"


def forward(apps, schema_editor):
    role = runtime_role(schema_editor)
    if role is not None:
        schema_editor.execute(f"GRANT TRUNCATE ON {STAGING} TO {role}")


def backward(apps, schema_editor):
    role = runtime_role(schema_editor)
    if role is not None:
        schema_editor.execute(f"REVOKE TRUNCATE ON {STAGING} FROM {role}")


class Migration(migrations.Migration):
    dependencies = [("tracing", "0003_timeline_order_by_attempt"), ("audit", "0003_runtime_role")]
    operations = [migrations.RunPython(forward, backward)]
