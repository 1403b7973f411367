"""API tokens and service accounts: who may hold, make and revoke them. Each write is atomic and audited.

A person manages their own tokens. A service account belongs to a team; an admin, or an approver who is a
member of that team, creates it, chooses its roles and manages its tokens. Service accounts never manage
tokens or accounts themselves, so a leaked token cannot mint longer-lived ones.
"""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.models import Group, User
from django.core.exceptions import PermissionDenied, ValidationError
from django.utils import timezone

from apps.accounts.models import ApiToken, ServiceAccount, Team, slug_validator
from apps.accounts.roles import ADMIN, APPROVER, ROLES, has_role, roles_of
from apps.audit.recorder import audited, record
from control_plane.errors import require_actor

TOKEN_DAYS = (1, 365)  # the shortest and longest life a token may be given
DEFAULT_TOKEN_DAYS = 30
PASSWORD_LOGIN_TOKEN_NAME = "password login"


def is_service_account(user) -> bool:
    return getattr(user, "pk", None) is not None and ServiceAccount.objects.filter(user_id=user.pk).exists()


def may_manage_service_accounts(actor, team: Team) -> bool:
    """Admins, and approvers who are members of the team (its leads); never a service account."""
    if getattr(actor, "pk", None) is None or is_service_account(actor):
        return False
    return has_role(actor, ADMIN) or (has_role(actor, APPROVER) and team.members.filter(pk=actor.pk).exists())


def may_manage_tokens_of(actor, owner: User) -> bool:
    if getattr(actor, "pk", None) is None or is_service_account(actor):
        return False
    if owner.pk == actor.pk:
        return True
    account = ServiceAccount.objects.filter(user=owner).select_related("team").first()
    return account is not None and may_manage_service_accounts(actor, account.team)


def tokens_visible_to(actor):
    """The tokens `actor` may list and revoke: their own, those of service accounts they manage; admins all."""
    if has_role(actor, ADMIN) and not is_service_account(actor):
        return ApiToken.objects.select_related("user", "user__service_account__team")
    mine = ApiToken.objects.filter(user=actor)
    teams = [t for t in Team.objects.filter(members=actor) if may_manage_service_accounts(actor, t)]
    managed = ApiToken.objects.filter(user__service_account__team__in=teams) if teams else ApiToken.objects.none()
    return (mine | managed).select_related("user", "user__service_account__team")


def service_accounts_visible_to(actor):
    if has_role(actor, ADMIN) and not is_service_account(actor):
        return ServiceAccount.objects.select_related("team", "user")
    teams = [t for t in Team.objects.filter(members=actor) if may_manage_service_accounts(actor, t)]
    return ServiceAccount.objects.filter(team__in=teams).select_related("team", "user")


def _token_state(token: ApiToken) -> dict:
    return {"owner": token.user.username, "name": token.name, "key_prefix": token.token_key[:8],
            "created": token.created.isoformat() if token.created else None,
            "expiry": token.expiry.isoformat() if token.expiry else None}


def _check_days(expires_in_days) -> int:
    low, high = TOKEN_DAYS
    if isinstance(expires_in_days, bool) or not isinstance(expires_in_days, int) or not low <= expires_in_days <= high:
        raise ValidationError({"expires_in_days": f"Give a whole number of days from {low} to {high}."})
    return expires_in_days


@audited
def issue_token(*, actor, owner: User, name: str, expires_in_days: int = DEFAULT_TOKEN_DAYS) -> tuple[ApiToken, str]:
    """A new token for `owner` (the actor themself, or a service account they manage). Returns the token and
    its secret, which is shown once: only its digest is stored."""
    require_actor(actor)
    if not may_manage_tokens_of(actor, owner):
        raise PermissionDenied(f"{actor.username} may not make tokens for {owner.username}: a token is made by its "
                               "owner, or for a service account by an admin or an approver of its team")
    days = _check_days(expires_in_days)
    name = (name or "").strip()
    if not name or len(name) > 80:
        raise ValidationError({"name": "Name the token (up to 80 characters), e.g. what uses it."})
    if not owner.is_active:
        raise ValidationError({"owner": f"{owner.username} is disabled; enable it before making tokens."})
    token, secret = ApiToken.objects.create(user=owner, expiry=timedelta(days=days), name=name, created_by=actor)
    record(actor=actor, action="token.create", obj=token, object_repr=str(token)[:200], after=_token_state(token))
    return token, secret


@audited
def login_token(*, user: User) -> tuple[ApiToken, str]:
    """POST /api/v1/auth/token/: a person who gave their password gets a token with the default life."""
    return issue_token(actor=user, owner=user, name=PASSWORD_LOGIN_TOKEN_NAME)


@audited
def revoke_token(*, actor, token: ApiToken) -> None:
    require_actor(actor)
    token = ApiToken.objects.select_for_update().select_related("user").get(pk=token.pk)
    if not (may_manage_tokens_of(actor, token.user) or (has_role(actor, ADMIN) and not is_service_account(actor))):
        raise PermissionDenied(f"{actor.username} may not revoke tokens of {token.user.username}")
    before = _token_state(token)
    record(actor=actor, action="token.revoke", obj=token, object_repr=str(token)[:200], before=before,
           after={"revoked_at": timezone.now().isoformat()})
    token.delete()


@audited
def delete_expired_tokens(*, actor, now=None) -> int:
    """The hourly sweep (task accounts.delete_expired_tokens): delete every token past its expiry, one audit
    record each. Authentication refuses an expired token already; this removes it from the lists."""
    require_actor(actor)
    now = now or timezone.now()
    expired = list(ApiToken.objects.select_for_update().select_related("user").filter(expiry__lt=now))
    for token in expired:
        record(actor=actor, action="token.expire", obj=token, object_repr=str(token)[:200],
               before=_token_state(token), after={"deleted_at": now.isoformat()})
    ApiToken.objects.filter(pk__in=[t.pk for t in expired]).delete()
    return len(expired)


def _check_roles(actor, roles) -> list[str]:
    roles = sorted(set(roles))
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValidationError({"roles": f"unknown roles: {', '.join(sorted(unknown))}"})
    if not has_role(actor, ADMIN):
        beyond = set(roles) - (roles_of(actor) - {ADMIN})
        if beyond:
            raise ValidationError({"roles": f"you may give a service account only roles you hold yourself "
                                            f"(not {', '.join(sorted(beyond))}); ask an admin"})
    return roles


def _account_state(account: ServiceAccount) -> dict:
    return {"username": account.user.username, "team": account.team.name, "name": account.name,
            "description": account.description, "is_active": account.user.is_active,
            "roles": sorted(account.user.groups.filter(name__in=ROLES).values_list("name", flat=True))}


@audited
def create_service_account(*, actor, team: Team, name: str, roles: list[str], description: str = "") -> ServiceAccount:
    require_actor(actor)
    if not may_manage_service_accounts(actor, team):
        raise PermissionDenied(f"{actor.username} may not make service accounts of team {team.name}: "
                               "admins and approvers of the team may")
    try:
        slug_validator(name or "")
    except ValidationError as error:
        raise ValidationError({"name": error.messages}) from error
    if len(name) > 40:
        raise ValidationError({"name": "Use at most 40 characters."})
    roles = _check_roles(actor, roles)
    username = ServiceAccount.username_for(team.name, name)
    if ServiceAccount.objects.filter(team=team, name=name).exists() or User.objects.filter(username=username).exists():
        raise ValidationError({"name": f"Team {team.name} already has a service account named {name}."})
    user = User(username=username)
    user.set_unusable_password()  # reached only through its tokens
    user.save()
    user.groups.set(Group.objects.filter(name__in=roles))
    team.members.add(user)  # it acts for its team
    account = ServiceAccount.objects.create(team=team, name=name, user=user, description=description,
                                            created_by=actor)
    record(actor=actor, action="service_account.create", obj=account, after=_account_state(account))
    return account


@audited
def update_service_account(*, actor, account: ServiceAccount, roles: list[str] | None = None,
                           description: str | None = None, is_active: bool | None = None) -> ServiceAccount:
    require_actor(actor)
    account = ServiceAccount.objects.select_for_update().select_related("team", "user").get(pk=account.pk)
    if not may_manage_service_accounts(actor, account.team):
        raise PermissionDenied(f"{actor.username} may not change service accounts of team {account.team.name}")
    before = _account_state(account)
    if roles is not None:
        account.user.groups.set(Group.objects.filter(name__in=_check_roles(actor, roles)))
    if description is not None:
        account.description = description
        account.save(update_fields=["description"])
    if is_active is not None:
        account.user.is_active = bool(is_active)  # a disabled account's tokens are refused
        account.user.save(update_fields=["is_active"])
    record(actor=actor, action="service_account.update", obj=account, before=before, after=_account_state(account))
    return account
