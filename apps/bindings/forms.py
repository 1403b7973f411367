from django import forms

from apps.bindings.actions import BINDING_FIELDS, GRANT_FIELDS
from apps.bindings.choices import OnFailure
from apps.bindings.models import BindingApplication, GrantApplication
from apps.governance.forms import ApplicationForm
from apps.topics.choices import TopicStatus
from apps.topics.models import App, Topic


class TopicChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj):
        return f"{obj.name} ({obj.get_environment_display()}, {obj.cluster.name})"


class AppChoiceField(forms.ModelChoiceField):
    def label_from_instance(self, obj):
        return f"{obj.app_id} ({obj.team.name})"


class _UsesTopicAndApp(ApplicationForm):
    topic = TopicChoiceField(queryset=Topic.objects.none())
    app = AppChoiceField(queryset=App.objects.none())

    def limit_choices(self):
        self.fields["topic"].queryset = Topic.objects.filter(status=TopicStatus.ACTIVE).select_related("cluster")
        self.fields["app"].queryset = App.objects.filter(team__in=self.user_teams(), active=True) \
            .select_related("team")


class BindingApplicationForm(_UsesTopicAndApp):
    class Meta:
        model = BindingApplication
        fields = list(BINDING_FIELDS)
        widgets = {"description": forms.Textarea(attrs={"rows": 2}), "reason": forms.Textarea(attrs={"rows": 2})}
        help_texts = {
            "group": "The consumer group: all instances of your consumer share it.",
            "selector_pattern": "exact: one message type; wildcard: e.g. order.* (* for all); "
                                "regex: a Python regular expression matching the whole type.",
        }
        labels = {"app": "Consumer app"}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # ordered topics only (policy rule on-failure-ordered): a form that leaves it out keeps the default
        self.fields["on_failure"].required = False

    def clean_on_failure(self):
        return self.cleaned_data.get("on_failure") or OnFailure.BLOCK


class GrantApplicationForm(_UsesTopicAndApp):
    class Meta:
        model = GrantApplication
        fields = list(GRANT_FIELDS)
        widgets = {"description": forms.Textarea(attrs={"rows": 2}), "reason": forms.Textarea(attrs={"rows": 2})}
        labels = {"app": "Producer app"}
