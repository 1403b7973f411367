from django import forms

from apps.tracing.actions import MAX_EVERY_MINUTES, MIN_EVERY_MINUTES


class IndexScheduleForm(forms.Form):
    every_minutes = forms.IntegerField(min_value=MIN_EVERY_MINUTES, max_value=MAX_EVERY_MINUTES,
                                       label="Build every (minutes)")
    enabled = forms.BooleanField(required=False, label="Scheduled builds on")
