"""Writes to users, roles and teams. Each is atomic and leaves one audit record."""

from __future__ import annotations

from django.contrib.auth.models import Group, User
from django.db import transaction

from apps.accounts.models import Team
from apps.accounts.roles import ROLES
from apps.audit.recorder import record
from apps.audit.snapshot import snapshot
from control_plane.errors import require_perm


def _user_state(user: User) -> dict:
    return {"username": user.username, "email": user.email, "is_active": user.is_active,
            "roles": sorted(user.groups.filter(name__in=ROLES).values_list("name", flat=True))}


@transaction.atomic
def create_user(*, actor, username: str, password: str, email: str = "", roles: list[str] = ()) -> User:
    require_perm(actor, "auth.add_user")
    unknown = set(roles) - set(ROLES)
    if unknown:
        from django.core.exceptions import ValidationError

        raise ValidationError({"roles": f"unknown roles: {', '.join(sorted(unknown))}"})
    user = User(username=username, email=email)
    user.set_password(password)
    user.full_clean()
    user.save()
    user.groups.set(Group.objects.filter(name__in=roles))
    record(actor=actor, action="user.create", obj=user, after=_user_state(user))
    return user


@transaction.atomic
def set_roles(*, actor, user: User, roles: list[str]) -> User:
    require_perm(actor, "auth.change_user")
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
