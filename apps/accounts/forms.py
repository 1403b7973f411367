from django import forms

from apps.accounts.models import Team
from apps.accounts.roles import ROLE_LABELS, ROLES

TOKEN_LIFE_CHOICES = [(7, "7 days"), (30, "30 days"), (90, "90 days"), (365, "1 year")]
_ROLE_CHOICES = [(role, ROLE_LABELS[role]) for role in ROLES]


class TokenForm(forms.Form):
    name = forms.CharField(max_length=80, help_text="What uses it, e.g. 'deploy pipeline'.")
    expires_in_days = forms.TypedChoiceField(label="Expires after", choices=TOKEN_LIFE_CHOICES, coerce=int, initial=30)


class ServiceAccountForm(forms.Form):
    team = forms.ModelChoiceField(queryset=Team.objects.none(), to_field_name="name")
    name = forms.CharField(max_length=40, help_text="Lowercase letters, digits and '-'.")
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    roles = forms.MultipleChoiceField(choices=_ROLE_CHOICES, required=False, widget=forms.CheckboxSelectMultiple)

    def __init__(self, *args, teams=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["team"].queryset = teams if teams is not None else Team.objects.none()


class ServiceAccountEditForm(forms.Form):
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    roles = forms.MultipleChoiceField(choices=_ROLE_CHOICES, required=False, widget=forms.CheckboxSelectMultiple)
    is_active = forms.BooleanField(required=False, label="Active (its tokens work)")


class SsoMappingForm(forms.Form):
    source = forms.ChoiceField(choices=[("oidc", "OpenID Connect"), ("ldap", "LDAP")])
    group = forms.CharField(max_length=255, help_text="A groups-claim value (OIDC), or an LDAP group's name or DN.")
    role = forms.ChoiceField(choices=[("", "— no role —"), *_ROLE_CHOICES], required=False)
    team = forms.ModelChoiceField(queryset=Team.objects.all(), to_field_name="name", required=False,
                                  empty_label="— no team —")
