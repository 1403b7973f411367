from django import forms

from apps.clusters.choices import ClusterStatus
from apps.clusters.models import Cluster
from apps.moves.choices import DeadLetters
from apps.moves.models import FOLLOW_S_RANGE
from apps.topics.models import Topic


class MoveForm(forms.Form):
    """Start a move of a topic (the topic page's form, and the page it falls back to with field errors)."""

    topic = forms.ModelChoiceField(queryset=Topic.objects.all(), widget=forms.HiddenInput)
    target = forms.ModelChoiceField(queryset=Cluster.objects.none(), to_field_name="name", label="Move to cluster",
                                    help_text="Active clusters of the topic's environment.")
    dead_letters = forms.ChoiceField(
        choices=DeadLetters.choices, widget=forms.RadioSelect, label="Dead letters of the source",
        help_text="Once the source is drained, its dead letters are moved to the target or discarded with it.")
    client_follow_s = forms.IntegerField(
        label="Seconds clients get to follow a route change", initial=5, min_value=FOLLOW_S_RANGE[0],
        max_value=FOLLOW_S_RANGE[1], help_text="The SDK follows within 5 s; give more for slower clients.")

    def __init__(self, *args, topic: Topic | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        topic = topic or self._topic_of_data()
        clusters = Cluster.objects.filter(status=ClusterStatus.ACTIVE)
        if topic is not None:
            self.fields["topic"].initial = topic.pk
            clusters = clusters.filter(environment=topic.environment).exclude(pk=topic.cluster_id)
        self.fields["target"].queryset = clusters.order_by("name")

    def _topic_of_data(self) -> Topic | None:
        raw = self.data.get("topic") if self.is_bound else None
        return Topic.objects.filter(pk=raw).first() if raw and str(raw).isdigit() else None
