"""A message's timeline moves into its tracing_message row (JSON text); the table of a row per event goes."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('tracing', '0005_drop_staging_tables'),
    ]

    operations = [
        migrations.DeleteModel(
            name='TraceEvent',
        ),
        migrations.AddField(
            model_name='tracedmessage',
            name='timeline',
            field=models.TextField(default='[]'),
        ),
    ]
