"""The two PostgreSQL roles of the control plane (docs/security.md, "The audit log and PostgreSQL roles").

The owner role owns every table and runs `manage.py migrate`; the runtime role (web, Celery, Spark's load) gets
ordinary DML on the tables the owner creates, by default privileges, and no DDL. Migrations narrow it further
(the audit log: INSERT and SELECT only). The role names come from settings, the roles themselves from whoever
runs PostgreSQL (devstack makes them).
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.core.management.base import CommandError
from django.db import connections

log = logging.getLogger("control_plane.db_roles")

TABLE_DML = "SELECT, INSERT, UPDATE, DELETE"
SEQUENCE_USE = "USAGE, SELECT, UPDATE"


def runtime_role(schema_editor) -> str | None:
    """The runtime role's quoted name, or None when this database runs everything as one role (then there is
    nothing to grant; a warning says the audit log is not protected from the running service)."""
    connection = schema_editor.connection
    role = settings.SWITCHYARD_DB_RUNTIME_USER
    with connection.cursor() as cur:
        cur.execute("SELECT current_user, EXISTS (SELECT 1 FROM pg_roles WHERE rolname = %s)", [role])
        current, exists = cur.fetchone()
    if role == current:
        log.warning("migrating as the runtime role %s itself: the running control plane owns its tables and can "
                    "erase the audit log; set SWITCHYARD_DB_USER to a role of its own", role)
        return None
    if not exists:
        raise CommandError(f"the runtime role {role!r} (SWITCHYARD_DB_USER) does not exist in PostgreSQL: create it "
                           f"(CREATE ROLE {role} LOGIN PASSWORD ...; devstack does) and run migrate again")
    return schema_editor.quote_name(role)


def grant_runtime_dml(schema_editor) -> None:
    """Ordinary DML for the runtime role on every table of the schema now, and on every table and sequence the
    migrating (owner) role creates later."""
    role = runtime_role(schema_editor)
    if role is None:
        return
    for statement in (
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT {TABLE_DML} ON TABLES TO {role}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public GRANT {SEQUENCE_USE} ON SEQUENCES TO {role}",
        f"GRANT {TABLE_DML} ON ALL TABLES IN SCHEMA public TO {role}",
        f"GRANT {SEQUENCE_USE} ON ALL SEQUENCES IN SCHEMA public TO {role}",
        # the running service reads which migrations ran; only migrate (as the owner) records them
        f"REVOKE INSERT, UPDATE, DELETE ON django_migrations FROM {role}",
    ):
        schema_editor.execute(statement)


def revoke_runtime_dml(schema_editor) -> None:
    role = runtime_role(schema_editor)
    if role is None:
        return
    for statement in (
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE {TABLE_DML} ON TABLES FROM {role}",
        f"ALTER DEFAULT PRIVILEGES IN SCHEMA public REVOKE {SEQUENCE_USE} ON SEQUENCES FROM {role}",
        f"REVOKE ALL ON ALL TABLES IN SCHEMA public FROM {role}",
        f"REVOKE ALL ON ALL SEQUENCES IN SCHEMA public FROM {role}",
    ):
        schema_editor.execute(statement)


def refuse_migrate_as_runtime(sender, using="default", **kwargs) -> None:
    """pre_migrate: migrations run as the owner role; the runtime role has no DDL and would fail half-way."""
    user = connections[using].settings_dict["USER"]
    if user == settings.SWITCHYARD_DB_RUNTIME_USER and user != settings.SWITCHYARD_DB_OWNER_USER:
        raise CommandError(f"migrate connects as the runtime role {user!r}, which may not change the schema: run it "
                           "as the owner, `SWITCHYARD_DB_ROLE=owner ./manage.py migrate` (with "
                           "SWITCHYARD_DB_OWNER_PASSWORD or SWITCHYARD_DB_OWNER_PASSWORD_FILE set)")
