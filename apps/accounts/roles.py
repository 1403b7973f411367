"""The five roles, as Django groups, and the model permissions each one holds.

Apps add their permissions here so that one table says who may do what.
"""

from __future__ import annotations

from django.apps import apps
from django.contrib.auth.models import Group, Permission
from django.utils.module_loading import autodiscover_modules

DEVELOPER = "developer"
APPROVER = "approver"
SRE = "sre"
AUDITOR = "auditor"
ADMIN = "admin"
ROLES = (DEVELOPER, APPROVER, SRE, AUDITOR, ADMIN)
ROLE_LABELS = {DEVELOPER: "Developer", APPROVER: "Approver", SRE: "SRE", AUDITOR: "Auditor", ADMIN: "Admin"}

_READ_ALL = [
    "clusters.view_cluster",
    "accounts.view_team",
    "audit.view_auditrecord",
]

ROLE_PERMISSIONS: dict[str, list[str]] = {
    DEVELOPER: ["clusters.view_cluster", "accounts.view_team"],
    APPROVER: ["clusters.view_cluster", "accounts.view_team"],
    SRE: [*_READ_ALL, "clusters.add_cluster", "clusters.change_cluster"],
    AUDITOR: [*_READ_ALL, "accounts.view_ssogroupmapping"],
    ADMIN: ["*"],
}


def extend(role: str, *perms: str) -> None:
    """Let an app grant a role its own permissions (called from the app's roles module)."""
    for perm in perms:
        if perm not in ROLE_PERMISSIONS[role]:
            ROLE_PERMISSIONS[role].append(perm)


def sync_role_groups(sender=None, **kwargs) -> None:
    """Create the role groups and set their permissions; safe to run any number of times.

    As a post_migrate receiver it runs once per migrate or flush: Django sends post_migrate once per app, and
    only the last app's signal comes after every app's permissions exist (a flush in each transactional test
    otherwise syncs the groups once per app)."""
    if sender is not None:
        with_models = [c for c in apps.get_app_configs() if c.models_module is not None]
        if with_models and sender is not with_models[-1]:
            return
    autodiscover_modules("roles")  # apps register their role permissions on import
    every = {(p.content_type.app_label, p.codename): p for p in Permission.objects.select_related("content_type")}
    for role, perms in ROLE_PERMISSIONS.items():
        group, _ = Group.objects.get_or_create(name=role)
        if perms == ["*"]:
            wanted = list(every.values())
        else:
            wanted = [every[key] for key in (tuple(perm.split(".")) for perm in perms) if key in every]
        group.permissions.set(wanted)


def roles_of(user) -> set[str]:
    if not user or not user.is_authenticated or not hasattr(user, "groups"):  # system actors hold no roles
        return set()
    names = set(user.groups.values_list("name", flat=True))
    if user.is_superuser:
        names.add(ADMIN)
    return names & set(ROLES)


def has_role(user, *roles: str) -> bool:
    return bool(roles_of(user) & set(roles))
