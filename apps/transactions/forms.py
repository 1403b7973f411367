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
