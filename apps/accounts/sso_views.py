"""Web pages of single sign-on: the login page (local, LDAP and OIDC side by side) and the group-mapping
rules (admins edit them; auditors read them)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth import views as auth_views
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from apps.accounts import sso_actions
from apps.accounts.forms import SsoMappingForm
from apps.accounts.models import ExternalIdentity, SsoGroupMapping
from apps.accounts.sso_backends import password_login_enabled
from control_plane.web import errors_on


class LoginView(auth_views.LoginView):
    """Anyone. The username and password form (local accounts and LDAP) unless both are off, and the OIDC
    button when OIDC is configured."""

    template_name = "registration/login.html"

    def get_context_data(self, **kwargs):
        return {**super().get_context_data(**kwargs), "password_login": password_login_enabled(),
                "oidc_enabled": settings.SWITCHYARD_OIDC_ENABLED, "oidc_label": settings.SWITCHYARD_OIDC_LABEL,
                "sso_failed": self.request.GET.get("sso") == "failed"}

    def post(self, request, *args, **kwargs):
        if not password_login_enabled():
            raise PermissionDenied(f"Log in with {settings.SWITCHYARD_OIDC_LABEL}: password login is switched off.")
        return super().post(request, *args, **kwargs)


class SsoMappingsView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """The rules that map directory groups to roles and teams; admins add and remove them (audited)."""

    permission_required = "accounts.view_ssogroupmapping"
    raise_exception = True

    def get(self, request, form=None):
        return render(request, "accounts/sso_mappings.html", {
            "mappings": SsoGroupMapping.objects.select_related("team"),
            "form": form or SsoMappingForm(), "may_edit": request.user.has_perm("accounts.add_ssogroupmapping"),
            "oidc_enabled": settings.SWITCHYARD_OIDC_ENABLED, "oidc_issuer": settings.SWITCHYARD_OIDC_ISSUER,
            "ldap_enabled": bool(settings.AUTH_LDAP_SERVER_URI), "ldap_uri": settings.AUTH_LDAP_SERVER_URI,
            "local_login": settings.SWITCHYARD_LOCAL_LOGIN,
            "sso_users": ExternalIdentity.objects.select_related("user").order_by("source", "user__username")})

    def post(self, request):
        if not request.user.has_perm("accounts.add_ssogroupmapping"):
            raise PermissionDenied("Only admins edit the SSO group mapping.")
        form = SsoMappingForm(request.POST)
        if form.is_valid():
            with errors_on(form):
                mapping = sso_actions.create_mapping(actor=request.user, **form.cleaned_data)
                messages.success(request, f"Rule added: {mapping}.")
                return redirect("accounts:sso-mappings")
        return self.get(request, form=form)


class DeleteSsoMappingView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "accounts.delete_ssogroupmapping"
    raise_exception = True

    def post(self, request, pk):
        mapping = get_object_or_404(SsoGroupMapping, pk=pk)
        sso_actions.delete_mapping(actor=request.user, mapping=mapping)
        messages.success(request, f"Rule removed: {mapping}. It stops applying at each user's next login or sync.")
        return redirect("accounts:sso-mappings")
