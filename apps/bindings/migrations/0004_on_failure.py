# What a failing message does to its order key on an ordered topic (issue 21; docs/ordered-topics.md).

from django.db import migrations, models

ON_FAILURE = models.CharField(
    choices=[('block', 'Block the key: deliver the message again until it is acknowledged'),
             ('dead_letter', 'Dead-letter the message at the delivery limit and go on with the key')],
    default='block',
    help_text="Ordered topics only: block the key until its message is acknowledged, or dead-letter the message at "
              "the delivery limit and let the key's next message go.",
    max_length=16, verbose_name='on failure (ordered topics)')


class Migration(migrations.Migration):

    dependencies = [
        ('bindings', '0003_application_number_and_removal'),
    ]

    operations = [
        migrations.AddField(model_name='binding', name='on_failure', field=ON_FAILURE),
        migrations.AddField(model_name='bindingapplication', name='on_failure', field=ON_FAILURE.clone()),
    ]
