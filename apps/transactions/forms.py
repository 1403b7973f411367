from django import forms

from apps.clusters.choices import ClusterStatus
from apps.clusters.models import Cluster


class RedriveForm(forms.Form):
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.filter(status=ClusterStatus.ACTIVE),
                                     to_field_name="name")
    topic = forms.CharField(max_length=255)
    group = forms.CharField(max_length=63, help_text="The consumer group whose dead letters go back to it.")
    since = forms.DateTimeField(required=False, help_text="UTC, e.g. 2025-01-31 08:00 (empty: from the first)")
    until = forms.DateTimeField(required=False, help_text="UTC (empty: up to now)")
    message_ids = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                                  help_text="Or these message ids, separated by commas or new lines.")

    def clean_message_ids(self):
        raw = self.cleaned_data["message_ids"]
        return [part.strip() for part in raw.replace("\n", ",").split(",") if part.strip()]


class CheckUrlForm(forms.Form):
    check_url = forms.URLField(required=False, max_length=500, label="HTTP check URL", assume_scheme="http",
                               help_text="Leave empty to remove it.")


class DeadLetterFilterForm(forms.Form):
    """The dead-letter browser's filters (a GET form: every field may stay empty)."""

    message_type = forms.CharField(required=False, max_length=255)
    key = forms.CharField(required=False, max_length=255)
    business_id = forms.CharField(required=False, max_length=255, label="Business id")
    since = forms.DateTimeField(required=False, help_text="Dead at or after (UTC)")
    until = forms.DateTimeField(required=False, help_text="Dead before (UTC)")

    def clean(self):
        data = super().clean()
        if data.get("since") and data.get("until") and data["since"] >= data["until"]:
            self.add_error("until", "The end of the time range must be after its start.")
        return data


class DeadLetterActionForm(DeadLetterFilterForm):
    """What to do with the dead letters shown: the selected ones, or all that match the filters (carried along)."""

    OPERATIONS = [("redrive", "Re-drive"), ("delete", "Delete"), ("copy", "Copy")]
    operation = forms.ChoiceField(choices=OPERATIONS)
    scope = forms.ChoiceField(choices=[("selected", "The selected dead letters"), ("all", "All that match")],
                              initial="selected")
    to_topic = forms.CharField(required=False, max_length=255, label="Copy to topic")


class GroupResetForm(forms.Form):
    to = forms.DateTimeField(required=False, label="Skip what was stored before (UTC)",
                             help_text="Empty: now (skip the whole backlog).")
    confirm = forms.BooleanField(label="I understand: these messages will not be delivered to this group.",
                                 error_messages={"required": "Tick the box to confirm the reset."})
