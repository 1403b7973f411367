"""Web pages: your API tokens, team service accounts and their tokens, login lock-outs (admins)."""

from __future__ import annotations

from axes.models import AccessAttempt
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import PermissionDenied
from django.shortcuts import get_object_or_404, redirect, render
from django.views import View

from apps.accounts import lockouts, token_actions
from apps.accounts.forms import ServiceAccountEditForm, ServiceAccountForm, TokenForm
from apps.accounts.models import ApiToken, ServiceAccount, Team
from apps.accounts.roles import ADMIN, APPROVER, ROLES, has_role
from control_plane.errors import ActionError
from control_plane.web import errors_on


class TokensView(LoginRequiredMixin, View):
    """Your own API tokens: list, make one (its secret is shown once), revoke."""

    def get(self, request, form=None, secret=None):
        tokens = ApiToken.objects.filter(user=request.user).order_by("-created")
        return render(request, "accounts/tokens.html", {"tokens": tokens, "form": form or TokenForm(),
                                                        "secret": secret, "owner": request.user})

    def post(self, request):
        form = TokenForm(request.POST)
        if form.is_valid():
            with errors_on(form):
                _, secret = token_actions.issue_token(actor=request.user, owner=request.user, **form.cleaned_data)
                return self.get(request, secret=secret)
        return self.get(request, form=form)


@login_required
def revoke_token(request, pk):
    if request.method != "POST":
        return redirect("accounts:tokens")
    token = get_object_or_404(token_actions.tokens_visible_to(request.user), pk=pk)
    account = ServiceAccount.objects.filter(user_id=token.user_id).first()
    token_actions.revoke_token(actor=request.user, token=token)
    messages.success(request, f"Token {token.name} revoked.")
    return redirect("accounts:service-account", account.pk) if account else redirect("accounts:tokens")


def _manageable_teams(user):
    teams = Team.objects.all() if has_role(user, ADMIN) else Team.objects.filter(members=user)
    return Team.objects.filter(pk__in=[t.pk for t in teams if token_actions.may_manage_service_accounts(user, t)])


class ServiceAccountListView(LoginRequiredMixin, View):
    def get(self, request, form=None):
        if not has_role(request.user, ADMIN, APPROVER) or token_actions.is_service_account(request.user):
            raise PermissionDenied("Service accounts are managed by admins and by approvers of their team.")
        teams = _manageable_teams(request.user)
        accounts = token_actions.service_accounts_visible_to(request.user).prefetch_related("user__groups")
        return render(request, "accounts/service_accounts.html", {
            "accounts": accounts, "form": form or ServiceAccountForm(teams=teams)})

    def post(self, request):
        form = ServiceAccountForm(request.POST, teams=_manageable_teams(request.user))
        if form.is_valid():
            with errors_on(form):
                account = token_actions.create_service_account(actor=request.user, **form.cleaned_data)
                messages.success(request, f"Service account {account.user.username} created.")
                return redirect("accounts:service-account", account.pk)
        return self.get(request, form=form)


class ServiceAccountView(LoginRequiredMixin, View):
    """One service account: its roles and state, its tokens (make one, revoke)."""

    def _account(self, request, pk):
        return get_object_or_404(token_actions.service_accounts_visible_to(request.user), pk=pk)

    def get(self, request, pk, form=None, token_form=None, secret=None):
        account = self._account(request, pk)
        initial = {"description": account.description, "is_active": account.user.is_active,
                   "roles": list(account.user.groups.filter(name__in=ROLES).values_list("name", flat=True))}
        return render(request, "accounts/service_account.html", {
            "account": account, "form": form or ServiceAccountEditForm(initial=initial),
            "token_form": token_form or TokenForm(), "secret": secret, "owner": account.user,
            "tokens": ApiToken.objects.filter(user=account.user).order_by("-created")})

    def post(self, request, pk):
        account = self._account(request, pk)
        if request.POST.get("do") == "token":
            token_form = TokenForm(request.POST)
            if token_form.is_valid():
                with errors_on(token_form):
                    _, secret = token_actions.issue_token(actor=request.user, owner=account.user,
                                                          **token_form.cleaned_data)
                    return self.get(request, pk, secret=secret)
            return self.get(request, pk, token_form=token_form)
        form = ServiceAccountEditForm(request.POST)
        if form.is_valid():
            with errors_on(form):
                token_actions.update_service_account(actor=request.user, account=account, **form.cleaned_data)
                messages.success(request, "Service account saved.")
                return redirect("accounts:service-account", account.pk)
        return self.get(request, pk, form=form)


class LockoutsView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """Logins locked out after too many failures; an admin lifts one (audited)."""

    permission_required = "axes.view_accessattempt"
    raise_exception = True

    def get(self, request):
        return render(request, "accounts/lockouts.html", {"lockouts": lockouts.active_lockouts()})


class LiftLockoutView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "axes.delete_accessattempt"
    raise_exception = True

    def post(self, request, pk):
        attempt = get_object_or_404(AccessAttempt, pk=pk)
        try:
            lockouts.lift_lockout(actor=request.user, attempt=attempt)
            messages.success(request, f"Lock-out of {attempt.username} from {attempt.ip_address} lifted.")
        except ActionError as error:
            messages.error(request, error.message)
        return redirect("accounts:lockouts")
