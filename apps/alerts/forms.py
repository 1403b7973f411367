from django import forms

from apps.alerts.choices import RuleKind
from apps.clusters.models import Cluster
from apps.topics.models import Topic


class LinesField(forms.CharField):
    """One value per line (or comma-separated) → a list; each value is checked by the action."""

    widget = forms.Textarea(attrs={"rows": 2})

    def prepare_value(self, value):
        return "\n".join(value) if isinstance(value, list) else value

    def to_python(self, value):
        text = super().to_python(value) or ""
        return [v.strip() for v in text.replace(",", "\n").splitlines() if v.strip()]


class AlertRuleForm(forms.Form):
    """Add or change an alarm rule; the action decides what is allowed (apps.alerts.actions)."""

    name = forms.CharField(max_length=100)
    kind = forms.ChoiceField(choices=RuleKind.choices)
    cluster = forms.ModelChoiceField(queryset=Cluster.objects.order_by("name"), to_field_name="name")
    topic = forms.ModelChoiceField(queryset=Topic.objects.order_by("name"), required=False,
                                   help_text="Your team's topic; empty for cluster-wide kinds (SREs).")
    group = forms.CharField(max_length=200, required=False, help_text="Consumer group (lag, backlog, consumers).")
    threshold = forms.FloatField(min_value=0, required=False,
                                 help_text="Empty: 1 for 'fewer consumers' and 'fewer live brokers'.")
    for_seconds = forms.IntegerField(min_value=0, initial=60, label="For (seconds)",
                                     help_text="How long the condition holds before the alarm fires.")
    webhook_urls = LinesField(required=False, label="Webhooks", help_text="http(s) URLs, one per line.")
    emails = LinesField(required=False, label="E-mail", help_text="Addresses, one per line.")
    enabled = forms.BooleanField(required=False, initial=True)

    def fields_for_action(self) -> dict:
        data = dict(self.cleaned_data)
        if data.get("threshold") is None:
            data.pop("threshold")
        return data
