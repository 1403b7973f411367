from django.db import migrations

# The database itself refuses UPDATE and DELETE on the audit log, whatever path a write takes.
FORWARD = """
CREATE OR REPLACE FUNCTION audit_record_append_only() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'audit records are append-only: % refused on audit_auditrecord', TG_OP;
END;
$$ LANGUAGE plpgsql;
CREATE TRIGGER audit_record_no_update_delete
    BEFORE UPDATE OR DELETE ON audit_auditrecord
    FOR EACH ROW EXECUTE FUNCTION audit_record_append_only();
"""
BACKWARD = """
DROP TRIGGER IF EXISTS audit_record_no_update_delete ON audit_auditrecord;
DROP FUNCTION IF EXISTS audit_record_append_only();
"""


class Migration(migrations.Migration):
    dependencies = [("audit", "0001_initial")]
    operations = [migrations.RunSQL(FORWARD, BACKWARD)]
