from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from knox.models import AbstractAuthToken
from knox.settings import CONSTANTS

slug_validator = RegexValidator(
    r"^[a-z][a-z0-9-]{1,62}$", "Use 2–63 characters: lowercase letters, digits and '-', starting with a letter."
)


class Team(models.Model):
    """A team owns apps, topics and bindings; its members act for it."""

    name = models.CharField(max_length=63, unique=True, validators=[slug_validator])
    display_name = models.CharField(max_length=120)
    description = models.TextField(blank=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="teams", blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ServiceAccount(models.Model):
    """A team's automation identity: a user that cannot log in with a password, holding chosen roles, acting
    for its team (it is a member), reached only through its API tokens."""

    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="service_accounts")
    name = models.CharField(max_length=40, validators=[slug_validator])
    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="service_account")
    description = models.TextField(blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["team__name", "name"]
        constraints = [models.UniqueConstraint(fields=["team", "name"], name="unique_service_account_per_team")]

    def __str__(self) -> str:
        return self.user.username

    @staticmethod
    def username_for(team_name: str, name: str) -> str:
        return f"svc.{team_name}.{name}"


class ApiToken(AbstractAuthToken):
    """An API token (django-rest-knox): only the SHA-512 digest of the secret is stored, with the first
    characters (token_key) to find it. Every token expires; revoking deletes it (the audit log keeps its story)."""

    id = models.BigAutoField(primary_key=True)
    digest = models.CharField(max_length=CONSTANTS.DIGEST_LENGTH, unique=True)
    name = models.CharField(max_length=80)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                   related_name="+")
    last_used_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created"]

    def __str__(self) -> str:
        return f"{self.name} ({self.token_key[:8]}…) of {self.user.username}"


# --- single sign-on (docs/sso.md) -------------------------------------------------------------------------

OIDC = "oidc"
LDAP = "ldap"
SSO_SOURCES = [(OIDC, "OpenID Connect"), (LDAP, "LDAP")]


class ExternalIdentity(models.Model):
    """Links a user to the identity provider that made it. Such a user has no usable password; its roles and
    teams follow the directory groups at every login (and, for LDAP, at every sync)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identity")
    source = models.CharField(max_length=8, choices=SSO_SOURCES)
    # OIDC: the `sub` claim; LDAP: the username, lowercase (a DN changes when an entry moves)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, blank=True, help_text="The directory groups seen at the last login or sync.")
    # set when the directory (a sync) deactivated the user; a later login or sync that finds it active again
    # reactivates it. A user an admin deactivated stays so.
    deactivated_by_directory = models.BooleanField(default=False)
    last_synced_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["source", "subject"], name="unique_external_identity")]

    def __str__(self) -> str:
        return f"{self.source}:{self.subject}"


class SsoGroupMapping(models.Model):
    """A rule: members of a directory group (an OIDC groups-claim value, or an LDAP group's name or DN) get a
    role, are members of a team, or both. Applied at every SSO login: the rules decide an SSO user's roles and
    teams entirely."""

    source = models.CharField(max_length=8, choices=SSO_SOURCES)
    group = models.CharField(max_length=255, help_text="Compared without regard to case.")
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="sso_mappings")
    role = models.CharField(max_length=20, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["source", "group", "id"]
        constraints = [models.UniqueConstraint(fields=["source", "group", "team", "role"], nulls_distinct=False,
                                               name="unique_sso_group_mapping")]

    def __str__(self) -> str:
        what = ", ".join(x for x in (f"role {self.role}" if self.role else "",
                                     f"team {self.team.name}" if self.team_id else "") if x)
        return f"{self.source} group {self.group} → {what}"
