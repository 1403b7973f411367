from django import forms
from django.contrib import admin
from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from knox.models import AuthToken as KnoxAuthToken

from apps.accounts import actions
from apps.accounts.models import Team
from apps.accounts.roles import ROLE_LABELS, ROLES
from control_plane.web import ActionAdmin

# Django's and knox's own admins write users, groups and tokens directly, with no audit record: users are
# edited below through the actions; roles are groups kept by roles.py; tokens are made on the API tokens page.
admin.site.unregister(User)
admin.site.unregister(Group)
if admin.site.is_registered(KnoxAuthToken):
    admin.site.unregister(KnoxAuthToken)

_ROLE_CHOICES = [(role, ROLE_LABELS[role]) for role in ROLES]


class _UserForm(forms.ModelForm):
    roles = forms.MultipleChoiceField(choices=_ROLE_CHOICES, required=False,
                                      widget=forms.CheckboxSelectMultiple)
    new_password = forms.CharField(widget=forms.PasswordInput(render_value=False), strip=False)

    class Meta:
        model = User
        fields = ()

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        if self.instance.pk:
            self.fields["roles"].initial = list(self.instance.groups.filter(name__in=ROLES)
                                                .values_list("name", flat=True))

    def clean_new_password(self):
        password = self.cleaned_data.get("new_password")
        if password:
            validate_password(password, self.instance)
        return password


class _UserChangeForm(_UserForm):
    new_password = forms.CharField(widget=forms.PasswordInput(render_value=False), strip=False, required=False,
                                   help_text="Leave empty to keep the current password.")


@admin.register(User)
class UserAdmin(ActionAdmin):
    """Users are created and changed through the accounts actions; each save leaves one audit record."""

    list_display = ("username", "email", "is_active", "is_staff", "is_superuser", "last_login")
    list_filter = ("is_active", "is_staff", "is_superuser", "groups")
    search_fields = ("username", "email")
    add_fields = ("username", "new_password", "email", "roles")
    change_fields = ("email", "is_active", "is_staff", "is_superuser", "roles", "new_password")

    def get_fields(self, request, obj=None):
        return self.change_fields if obj is not None and obj.pk else self.add_fields

    def get_form(self, request, obj=None, change=False, **kwargs):
        kwargs["form"] = _UserChangeForm if obj is not None else _UserForm
        return super().get_form(request, obj, change=change, **kwargs)

    def create_via_action(self, request, obj, data):
        return actions.create_user(actor=request.user, username=data["username"], password=data["new_password"],
                                   email=data.get("email", ""), roles=data.get("roles", []))

    def update_via_action(self, request, obj, data):
        return actions.update_user(actor=request.user, user=obj, email=data["email"], is_active=data["is_active"],
                                   is_staff=data["is_staff"], is_superuser=data["is_superuser"],
                                   roles=data["roles"], password=data.get("new_password") or None)


@admin.register(Team)
class TeamAdmin(ActionAdmin):
    list_display = ("name", "display_name")
    fields = ("name", "display_name", "description", "members")
    filter_horizontal = ("members",)

    def create_via_action(self, request, obj, data):
        return actions.create_team(actor=request.user, **data)

    def update_via_action(self, request, obj, data):
        return actions.update_team(actor=request.user, team=obj, **data)
