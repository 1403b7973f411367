"""The index Django adds for LIKE searches on a varchar primary key: nothing searches message ids by pattern,
and it was one of five indexes every load of a million summaries had to maintain."""

from django.db import migrations

LIKE_INDEX = "tracing_message_message_id_2e34b6a7_like"


class Migration(migrations.Migration):
    dependencies = [("tracing", "0006_timeline_in_the_message_row")]
    operations = [migrations.RunSQL(
        f"DROP INDEX IF EXISTS {LIKE_INDEX}",
        f"CREATE INDEX {LIKE_INDEX} ON tracing_message (message_id varchar_pattern_ops)")]
