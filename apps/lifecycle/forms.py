"""The web forms of lifecycle applications: a change form on the target's own fields, pre-filled with its current
values (or a draft's), and a reason; the other operations ask for the reason only. The action validates again."""

from __future__ import annotations

import copy

from django import forms

from apps.accounts.models import Team
from apps.bindings.models import Binding
from apps.lifecycle.targets import CHANGEABLE, plain
from apps.topics.models import Topic
from broker_core.layout import MAX_PARTITIONS

REASON_HELP = "Why; the approver reads it."


class ReasonForm(forms.Form):
    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), help_text=REASON_HELP)

    def __init__(self, *args, target=None, changes=None, **kwargs):
        super().__init__(*args, **kwargs)

    def changes(self) -> dict:
        return {}


class _ChangeForm(forms.ModelForm):
    """A target's changeable fields, bound to a copy of it (the form never saves), plus the reason."""

    reason = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), help_text=REASON_HELP)

    def __init__(self, *args, target, changes=None, **kwargs):
        instance = copy.copy(target)
        instance._state = copy.copy(target._state)
        initial = {**{f: plain(target, f) for f in self._meta.fields}, **(changes or {}), **kwargs.pop("initial", {})}
        super().__init__(*args, instance=instance, initial=initial, **kwargs)

    def changes(self) -> dict:
        """Every field as JSON: the action keeps those that differ from the target."""
        out = {}
        for name in self._meta.fields:
            value = self.cleaned_data[name]
            out[name] = value.name if isinstance(value, Team) else value
        return out


class TopicChangeForm(_ChangeForm):
    message_types = forms.CharField(help_text="Comma-separated. A type a binding receives cannot be removed.")
    team = forms.ModelChoiceField(queryset=Team.objects.all(), to_field_name="name", label="Owning team",
                                  help_text="Hand the topic to another team (its approvers decide from then on).")
    partitions = forms.IntegerField(
        min_value=1, max_value=MAX_PARTITIONS, label="Partitions", required=False,
        help_text="How many partitions keys map to. A split adds partitions; a merge keeps the merged-away ones "
                  "placed until they are empty. On an ordered topic the keys that move are delivered from their new "
                  "partition only once their groups finished them on the old one, and a further change waits until "
                  "the previous one drained (the topic page shows the progress).")

    class Meta:
        model = Topic
        fields = list(CHANGEABLE["topic"])
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if isinstance(self.initial.get("message_types"), list):
            self.initial["message_types"] = ", ".join(self.initial["message_types"])

    def clean_message_types(self):
        return [part.strip() for part in self.cleaned_data["message_types"].split(",") if part.strip()]

    def clean_partitions(self):  # left out: the topic keeps what it has
        value = self.cleaned_data.get("partitions")
        return self.initial["partitions"] if value is None else value


class BindingChangeForm(_ChangeForm):
    class Meta:
        model = Binding
        fields = list(CHANGEABLE["binding"])
        widgets = {"description": forms.Textarea(attrs={"rows": 2})}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["on_failure"].required = False  # left out: the binding keeps what it has

    def clean_on_failure(self):
        return self.cleaned_data.get("on_failure") or self.initial["on_failure"]


class DropBacklogForm(forms.Form):
    confirm_backlog = forms.IntegerField(
        min_value=0, label="Messages to drop",
        help_text="Type the number of messages shown above: they are dropped with the binding, unconsumed.")
