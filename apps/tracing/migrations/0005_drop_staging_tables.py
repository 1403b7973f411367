"""The index job loads the lookup tables by COPY straight into them, or through a temporary table of its own
session (spark_jobs/pg_load.py): the staging tables are no longer used."""

import importlib

from django.db import migrations

from control_plane.db_roles import runtime_role

STAGING = "tracing_message_staging, tracing_event_staging"


def forward(apps, schema_editor):
    schema_editor.execute(f"DROP TABLE IF EXISTS {STAGING}")


def backward(apps, schema_editor):
    schema_editor.execute(importlib.import_module("apps.tracing.migrations.0001_initial").STAGING_SQL)
    role = runtime_role(schema_editor)
    if role is not None:
        schema_editor.execute(f"GRANT TRUNCATE ON {STAGING} TO {role}")


class Migration(migrations.Migration):
    dependencies = [("tracing", "0004_runtime_truncates_staging")]
    operations = [migrations.RunPython(forward, backward)]
