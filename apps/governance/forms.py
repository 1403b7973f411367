from django import forms

from apps.accounts.models import Team
from apps.accounts.roles import ADMIN, has_role


class ApplicationForm(forms.ModelForm):
    """A kind's application form: fields from the model, choices limited to what the user may use."""

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.user = user
        self.limit_choices()

    def user_teams(self):
        return Team.objects.all() if has_role(self.user, ADMIN) else Team.objects.filter(members=self.user)

    def limit_choices(self) -> None:
        pass

    def action_data(self) -> dict:
        return {name: self.cleaned_data[name] for name in self.Meta.fields}
