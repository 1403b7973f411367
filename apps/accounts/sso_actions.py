"""Single sign-on writes (docs/sso.md). Each is atomic and audited.

Admins edit the group-mapping rules. A directory login (OIDC or LDAP) or an LDAP sync calls `sign_in`, which
creates the user of a new identity (no usable password) and sets its roles and teams to exactly what the rules
give its groups; `deactivate` disables a user the directory no longer has and revokes its API tokens. The SSO
system actor (control_plane.actors.SSO) acts for the directory; every change of a user's roles, teams or state
leaves an audit record.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from django.contrib.auth.models import Group, User
from django.core.exceptions import ValidationError
from django.utils import timezone

from apps.accounts.models import LDAP, OIDC, ApiToken, ExternalIdentity, ServiceAccount, SsoGroupMapping, Team
from apps.accounts.roles import ADMIN, ROLES
from apps.audit.recorder import audited, record
from control_plane import actors
from control_plane.errors import ActionError, require_perm

log = logging.getLogger(__name__)


class SsoRefused(ActionError):
    """A directory login that must not become a Switchyard login (the message says why and what to do)."""


@dataclass(frozen=True)
class DirectoryUser:
    """What an identity provider says about a person at login or sync."""

    source: str  # OIDC or LDAP
    subject: str  # OIDC: the `sub` claim; LDAP: the username
    username: str
    email: str = ""
    first_name: str = ""
    last_name: str = ""
    groups: tuple[str, ...] = field(default_factory=tuple)


# --- the mapping rules -----------------------------------------------------------------------------------


def _mapping_state(mapping: SsoGroupMapping) -> dict:
    return {"source": mapping.source, "group": mapping.group, "team": mapping.team.name if mapping.team_id else None,
            "role": mapping.role or None}


def _clean_rule(mapping: SsoGroupMapping) -> None:
    errors = {}
    if mapping.source not in (OIDC, LDAP):
        errors["source"] = f"Use {OIDC!r} or {LDAP!r}."
    mapping.group = (mapping.group or "").strip()
    if not mapping.group or len(mapping.group) > 255:
        errors["group"] = "Name the directory group (up to 255 characters): a groups-claim value, or an LDAP group's name or DN."
    mapping.role = mapping.role or ""
    if mapping.role and mapping.role not in ROLES:
        errors["role"] = f"Unknown role {mapping.role!r}: use one of {', '.join(ROLES)}."
    if not mapping.role and not mapping.team_id:
        errors["role"] = "A rule gives a role, a team, or both: choose at least one."
    if errors:
        raise ValidationError(errors)
    twins = SsoGroupMapping.objects.filter(source=mapping.source, group__iexact=mapping.group, role=mapping.role,
                                           team_id=mapping.team_id).exclude(pk=mapping.pk)
    if twins.exists():
        raise ValidationError({"group": "The same rule exists already."})


@audited
def create_mapping(*, actor, source: str, group: str, team: Team | None = None, role: str = "") -> SsoGroupMapping:
    require_perm(actor, "accounts.add_ssogroupmapping")
    mapping = SsoGroupMapping(source=source, group=group, team=team, role=role or "")
    _clean_rule(mapping)
    mapping.save()
    record(actor=actor, action="sso_mapping.create", obj=mapping, after=_mapping_state(mapping))
    return mapping


@audited
def update_mapping(*, actor, mapping: SsoGroupMapping, **changes) -> SsoGroupMapping:
    require_perm(actor, "accounts.change_ssogroupmapping")
    mapping = SsoGroupMapping.objects.select_for_update().get(pk=mapping.pk)
    before = _mapping_state(mapping)
    for name in ("source", "group", "team", "role"):
        if name in changes:
            setattr(mapping, name, changes[name])
    _clean_rule(mapping)
    mapping.save()
    record(actor=actor, action="sso_mapping.update", obj=mapping, before=before, after=_mapping_state(mapping))
    return mapping


@audited
def delete_mapping(*, actor, mapping: SsoGroupMapping) -> None:
    """The rule stops applying at each user's next login or sync (roles and teams it gave are then removed)."""
    require_perm(actor, "accounts.delete_ssogroupmapping")
    mapping = SsoGroupMapping.objects.select_for_update().get(pk=mapping.pk)
    record(actor=actor, action="sso_mapping.delete", obj=mapping, before=_mapping_state(mapping))
    mapping.delete()


def mapped_access(source: str, groups) -> tuple[set[str], set[int]]:
    """The roles and team ids the rules of `source` give members of `groups` (compared without case)."""
    wanted = {g.lower() for g in groups}
    roles: set[str] = set()
    teams: set[int] = set()
    for rule in SsoGroupMapping.objects.filter(source=source):
        if rule.group.lower() in wanted:
            if rule.role:
                roles.add(rule.role)
            if rule.team_id:
                teams.add(rule.team_id)
    return roles, teams


# --- what a directory does to a user ---------------------------------------------------------------------


def _user_state(user: User) -> dict:
    return {"username": user.username, "email": user.email, "is_active": user.is_active, "is_staff": user.is_staff,
            "roles": sorted(user.groups.filter(name__in=ROLES).values_list("name", flat=True)),
            "teams": sorted(user.teams.values_list("name", flat=True))}


def _identity_for(person: DirectoryUser) -> ExternalIdentity:
    """The identity's row, locked; a new one (and its user, with no usable password) on first sight."""
    identity = (ExternalIdentity.objects.select_for_update().select_related("user")
                .filter(source=person.source, subject=person.subject).first())
    if identity is not None:
        return identity
    taken = User.objects.filter(username__iexact=person.username).first()
    if taken is not None:
        owner = "a service account" if ServiceAccount.objects.filter(user=taken).exists() else "a local account"
        raise SsoRefused(f"{person.source.upper()} login of {person.username!r} refused: {owner} has that username. "
                         "Rename or remove the local account (an admin), or map the directory's usernames "
                         "differently (docs/sso.md).")
    require_perm(actors.SSO, "auth.add_user")
    user = User(username=person.username, email=person.email)
    user.set_unusable_password()  # an SSO user logs in only through its identity provider
    try:
        user.full_clean(exclude=["password"])
    except ValidationError as error:
        raise SsoRefused(f"{person.source.upper()} login refused: the directory's username {person.username!r} "
                         f"is not a valid Switchyard username ({'; '.join(error.messages)})") from error
    user.save()
    identity = ExternalIdentity.objects.create(user=user, source=person.source, subject=person.subject)
    record(actor=actors.SSO, action="user.create", obj=user,
           after={**_user_state(user), "source": person.source, "subject": person.subject})
    return identity


@audited
def sign_in(*, person: DirectoryUser) -> User:
    """A successful directory login (or a sync that found the person): the user of this identity, created on
    first sight, with its profile from the directory and its roles and teams set to exactly what the mapping
    rules give its groups. A user the directory had deactivated is active again; one an admin deactivated is
    not. One audit record when anything changed."""
    actor = actors.SSO
    require_perm(actor, "auth.change_user")
    identity = _identity_for(person)
    user = User.objects.select_for_update().get(pk=identity.user_id)
    before = _user_state(user)
    for name in ("email", "first_name", "last_name"):
        value = (getattr(person, name) or "")[:150 if name != "email" else 254]
        if value != getattr(user, name):
            setattr(user, name, value)
    if identity.deactivated_by_directory and not user.is_active:
        user.is_active = True
    roles, team_ids = mapped_access(person.source, person.groups)
    user.is_staff = ADMIN in roles  # the Django admin site is for admins only
    user.save()
    user.groups.set(Group.objects.filter(name__in=roles))
    current = set(user.teams.values_list("pk", flat=True))
    for team in Team.objects.filter(pk__in=team_ids - current):
        team.members.add(user)
    for team in Team.objects.filter(pk__in=current - team_ids):
        team.members.remove(user)
    identity.groups = sorted(set(person.groups))
    identity.deactivated_by_directory = False
    identity.last_synced_at = timezone.now()
    identity.save()
    after = _user_state(user)
    if after != before:
        record(actor=actor, action="user.sso_sync", obj=user, before=before,
               after={**after, "source": person.source, "directory_groups": identity.groups})
    return user


@audited
def deactivate(*, identity: ExternalIdentity, reason: str) -> bool:
    """The directory no longer has this user (deleted, or disabled and so outside the user filter): disable
    it and revoke its API tokens. Returns whether anything changed."""
    actor = actors.SSO
    require_perm(actor, "auth.change_user")
    identity = ExternalIdentity.objects.select_for_update().get(pk=identity.pk)
    user = User.objects.select_for_update().get(pk=identity.user_id)
    if not user.is_active:
        return False
    before = _user_state(user)
    user.is_active = False
    user.save(update_fields=["is_active"])
    identity.deactivated_by_directory = True
    identity.last_synced_at = timezone.now()
    identity.save(update_fields=["deactivated_by_directory", "last_synced_at"])
    tokens = list(ApiToken.objects.filter(user=user).order_by("pk"))
    for token in tokens:
        record(actor=actor, action="token.revoke", obj=token, object_repr=str(token)[:200],
               before={"owner": user.username, "name": token.name, "key_prefix": token.token_key[:8]},
               after={"revoked_at": timezone.now().isoformat(), "reason": "directory deactivated the owner"})
    ApiToken.objects.filter(pk__in=[t.pk for t in tokens]).delete()
    record(actor=actor, action="user.sso_deactivate", obj=user, before=before,
           after={**_user_state(user), "reason": reason, "tokens_revoked": len(tokens)})
    log.info("directory user deactivated", extra={"username": user.username, "source": identity.source,
                                                  "reason": reason, "tokens_revoked": len(tokens)})
    return True
