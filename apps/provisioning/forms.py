from django import forms


class ScheduleForm(forms.Form):
    every_seconds = forms.IntegerField(min_value=10, max_value=86400, label="Run every (seconds)")
    enabled = forms.BooleanField(required=False)
    repair = forms.BooleanField(required=False, label="Repair automatically (otherwise only report)")
