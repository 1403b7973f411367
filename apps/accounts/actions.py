"""Writes to users, roles and teams. Each is atomic and leaves one audit record.

API tokens and service accounts: apps/accounts/token_actions.py; lifting login lock-outs: lockouts.py."""

from __future__ import annotations

from django.contrib.auth.models import Group, User
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import PermissionDenied, ValidationError
from django.db import transaction

from apps.accounts.models import ExternalIdentity, ServiceAccount, Team
from apps.accounts.roles import ROLES
from apps.audit.recorder import record
from apps.audit.snapshot import snapshot
from control_plane.errors import require_perm


def _user_state(user: User) -> dict:
    return {"username": user.username, "email": user.email, "is_active": user.is_active,
            "is_staff": user.is_staff, "is_superuser": user.is_superuser,
            "roles": sorted(user.groups.filter(name__in=ROLES).values_list("name", flat=True))}


def _check_roles(roles) -> None:
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValidationError({"roles": f"unknown roles: {', '.join(sorted(unknown))}"})


@transaction.atomic
def create_user(*, actor, username: str, password: str, email: str = "", roles: list[str] = ()) -> User:
    require_perm(actor, "auth.add_user")
    _check_roles(roles)
    _check_password(password, User(username=username, email=email))
    user = User(username=username, email=email)
    user.set_password(password)
    user.full_clean()
    user.save()
    user.groups.set(Group.objects.filter(name__in=roles))
    record(actor=actor, action="user.create", obj=user, after=_user_state(user))
    return user


def _check_password(password: str, user: User) -> None:
    try:
        validate_password(password, user)
    except ValidationError as error:
        raise ValidationError({"password": error.messages}) from error


@transaction.atomic
def update_user(*, actor, user: User, email: str | None = None, is_active: bool | None = None,
                is_staff: bool | None = None, is_superuser: bool | None = None, roles: list[str] | None = None,
                password: str | None = None) -> User:
    """Change a user's profile, flags, roles or password; the audit record never holds the password."""
    require_perm(actor, "auth.change_user")
    user = User.objects.select_for_update().get(pk=user.pk)
    # Only a superuser makes or unmakes a superuser, or touches one's account.
    if actor is not None and not actor.is_superuser and (user.is_superuser or is_superuser):
        raise PermissionDenied("only a superuser may change a superuser or make one")
    before = _user_state(user)
    for name, value in (("email", email), ("is_active", is_active), ("is_staff", is_staff),
                        ("is_superuser", is_superuser)):
        if value is not None:
            setattr(user, name, value)
    if password and ServiceAccount.objects.filter(user=user).exists():
        raise ValidationError({"password": "A service account has no password: it acts only through its tokens."})
    if password and ExternalIdentity.objects.filter(user=user).exists():
        raise ValidationError({"password": "A single sign-on user has no password: it logs in through its identity "
                                           "provider (docs/sso.md)."})
    if password:
        _check_password(password, user)
        user.set_password(password)
    user.full_clean()
    user.save()
    if roles is not None:
        _check_roles(roles)
        user.groups.set(Group.objects.filter(name__in=roles))
    after = _user_state(user)
    if password:
        after["password_changed"] = True
    record(actor=actor, action="user.update", obj=user, before=before, after=after)
    return user


@transaction.atomic
def set_roles(*, actor, user: User, roles: list[str]) -> User:
    require_perm(actor, "auth.change_user")
    _check_roles(roles)
    before = _user_state(user)
    user.groups.set(Group.objects.filter(name__in=roles))
    record(actor=actor, action="user.set_roles", obj=user, before=before, after=_user_state(user))
    return user


@transaction.atomic
def create_team(*, actor, name: str, display_name: str, description: str = "", members=()) -> Team:
    require_perm(actor, "accounts.add_team")
    team = Team(name=name, display_name=display_name, description=description)
    team.full_clean()
    team.save()
    team.members.set(members)
    record(actor=actor, action="team.create", obj=team, after=snapshot(team))
    return team


@transaction.atomic
def add_team_member(*, actor, team: Team, user: User) -> Team:
    require_perm(actor, "accounts.change_team")
    before = snapshot(team)
    team.members.add(user)
    record(actor=actor, action="team.add_member", obj=team, before=before, after=snapshot(team))
    return team


@transaction.atomic
def update_team(*, actor, team: Team, **changes) -> Team:
    require_perm(actor, "accounts.change_team")
    team = Team.objects.select_for_update().get(pk=team.pk)
    before = snapshot(team)
    members = changes.pop("members", None)
    for key, value in changes.items():
        setattr(team, key, value)
    team.full_clean()
    team.save()
    if members is not None:
        team.members.set(members)
    record(actor=actor, action="team.update", obj=team, before=before, after=snapshot(team))
    return team
