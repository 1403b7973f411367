"""A data migration that adds one interval task to django-celery-beat (an SRE edits it live in the admin).

    operations = [interval_task("End retired topics", "lifecycle.sweep_retired", every=60, period="seconds",
                                description="...")]

It leaves an existing task of that name as it is (an SRE may have changed it) and removes it on the way back.
"""

from django.db import migrations


def interval_task(name: str, task: str, *, every: int, period: str, description: str,
                  kwargs: str = "{}") -> migrations.RunPython:
    def create(apps, schema_editor):
        interval_model = apps.get_model("django_celery_beat", "IntervalSchedule")
        task_model = apps.get_model("django_celery_beat", "PeriodicTask")
        if task_model.objects.filter(name=name).exists():
            return
        interval, _ = interval_model.objects.get_or_create(every=every, period=period)
        task_model.objects.create(name=name, task=task, interval=interval, kwargs=kwargs, description=description)

    def remove(apps, schema_editor):
        apps.get_model("django_celery_beat", "PeriodicTask").objects.filter(name=name).delete()

    return migrations.RunPython(create, remove)
