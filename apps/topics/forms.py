from django import forms

from apps.clusters.choices import ClusterStatus
from apps.clusters.models import Cluster
from apps.governance.forms import ApplicationForm
from apps.topics.actions import APPLICATION_FIELDS
from apps.topics.models import App, TopicApplication


class ClusterChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj):
        return f"{obj.name} ({obj.get_environment_display()}, {obj.region})"


class TopicApplicationForm(ApplicationForm):
    message_types = forms.CharField(help_text="Comma-separated, e.g. created, paid, refunded.")
    cluster = ClusterChoiceField(queryset=Cluster.objects.none())

    class Meta:
        model = TopicApplication
        fields = list(APPLICATION_FIELDS)
        widgets = {"description": forms.Textarea(attrs={"rows": 2}), "reason": forms.Textarea(attrs={"rows": 2})}
        help_texts = {"name": "The owning team's name, a dot, then lowercase words: e.g. payments.order-paid.",
                      "ordered": "Per-key order for every group: each message needs an order key (the broker refuses "
                                 "one without, key_required), bindings consume in clustering mode (no broadcast), and "
                                 "no delayed messages. Give it at least as many partitions as its busiest group's "
                                 "consumers."}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance and self.instance.pk and isinstance(self.instance.message_types, list):
            self.initial["message_types"] = ", ".join(self.instance.message_types)

    def limit_choices(self):
        self.fields["team"].queryset = self.user_teams()
        self.fields["cluster"].queryset = Cluster.objects.filter(status=ClusterStatus.ACTIVE)

    def clean_message_types(self):
        raw = self.cleaned_data["message_types"]
        return [part.strip() for part in raw.split(",") if part.strip()]


class AppForm(forms.ModelForm):
    class Meta:
        model = App
        fields = ["app_id", "team", "description"]
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}
        help_texts = {"app_id": "Lowercase letters, digits and '-'; clients connect with it, e.g. billing-worker."}

    def __init__(self, *args, user, teams, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams
