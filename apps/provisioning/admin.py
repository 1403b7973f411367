from django import forms
from django.contrib import admin
from django.core.exceptions import ValidationError
from django_celery_beat.models import (
    ClockedSchedule,
    CrontabSchedule,
    IntervalSchedule,
    PeriodicTask,
    SolarSchedule,
)

from apps.governance.admin import ReadOnlyAdmin
from apps.provisioning import actions
from apps.provisioning.models import ReconcileRun, SyncState
from control_plane.web import ActionAdmin, apply_validation_error

# django-celery-beat's own admins write schedules directly (and run tasks) with no audit record: a
# schedule is changed only on the page below, through the actions; intervals are made by the action.
for model in (PeriodicTask, IntervalSchedule, CrontabSchedule, SolarSchedule, ClockedSchedule):
    admin.site.unregister(model)


@admin.register(SyncState)
class SyncStateAdmin(ReadOnlyAdmin):
    list_display = ("cluster", "kind", "path", "state", "desired_revision", "zk_revision", "attempts", "checked_at")
    list_filter = ("cluster", "kind", "state")
    search_fields = ("path", "error")


@admin.register(ReconcileRun)
class ReconcileRunAdmin(ReadOnlyAdmin):
    list_display = ("cluster", "started_at", "source", "repair", "reachable", "missing", "unexpected", "different",
                    "repaired", "duration_ms")
    list_filter = ("cluster", "repair", "reachable")


class _ScheduleForm(forms.ModelForm):
    every = forms.IntegerField(min_value=1)
    period = forms.ChoiceField(choices=[(p, p) for p in ("seconds", "minutes", "hours", "days")])

    class Meta:
        model = PeriodicTask
        fields = ("enabled",)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        interval = self.instance.interval if self.instance.pk else None
        if interval is not None:
            self.fields["every"].initial, self.fields["period"].initial = interval.every, interval.period

    def clean(self):
        data = super().clean()
        if "every" in data and "period" in data:
            try:
                actions.check_schedule(self.instance, data["every"], data["period"])
            except ValidationError as error:
                apply_validation_error(self, error)
        return data


@admin.register(PeriodicTask)
class ScheduleAdmin(ActionAdmin):
    """The periodic tasks Celery beat runs: interval and on/off are changed through the actions (audited);
    tasks are made by migrations, never added, deleted or run from here."""

    form = _ScheduleForm
    list_display = ("name", "task", "interval", "enabled", "last_run_at", "total_run_count")
    fields = ("name", "task", "description", "enabled", "every", "period", "last_run_at")
    readonly_fields = ("name", "task", "description", "last_run_at")
    actions = None

    def has_add_permission(self, request):
        return False

    def update_via_action(self, request, obj, data):
        return actions.update_schedule(actor=request.user, task=obj, every=data["every"], period=data["period"],
                                       enabled=data["enabled"])
