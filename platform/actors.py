"""Who acts when no person does: named system actors, each holding an explicit set of permissions.

Every action takes an actor (errors.require_actor). A background job acts as the system actor of its job,
so the audit log names it ("system:reconcile") and its permission set bounds what it may do.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SystemActor:
    """A job of the platform itself. `has_perm` answers from `perms` only; it has no roles and no team."""

    username: str
    perms: frozenset[str] = frozenset()

    pk = None
    is_authenticated = True
    is_active = True
    is_staff = False
    is_superuser = False

    def __post_init__(self):
        if not self.username.startswith("system:"):
            raise ValueError(f"a system actor's name starts with 'system:' (got {self.username!r})")

    def has_perm(self, perm: str, obj=None) -> bool:
        return perm in self.perms

    def __str__(self) -> str:
        return self.username


# The periodic and command-line reconcile: compare, and repair when the schedule or the command says so.
RECONCILE = SystemActor("system:reconcile", frozenset({"provisioning.add_reconcilerun", "provisioning.repair_drift"}))
# Pushing approved objects into ZooKeeper and recording what landed (no permission checks of its own).
PROVISIONING = SystemActor("system:provisioning")
# Transaction back-checks resolve prepared messages on the producer's answer.
TX_BACKCHECK = SystemActor("system:tx-backcheck", frozenset({"transactions.resolve_preparedmessage"}))
# Dead-letter re-drive started from the command line without --as-user, and the task's closing record.
REDRIVE = SystemActor("system:redrive", frozenset({"transactions.add_redrive"}))
# `manage.py secure_zookeeper`: applies the ACLs to every node of a cluster's chroot.
ZK_SECURE = SystemActor("system:zookeeper-secure", frozenset({"provisioning.repair_drift"}))
# The end of retired topics: retires drained bindings, deletes topics whose retention has passed.
RETIREMENT = SystemActor("system:retirement")
# The login guard (django-axes): records lock-outs.
LOGIN_GUARD = SystemActor("system:login-guard")
# Topic moves (apps.moves): the worker's steps change a topic's placements; `manage.py move_topic` without
# --as-user starts, rolls back and resumes moves as it.
MOVES = SystemActor("system:moves", frozenset({"provisioning.move_topic", "moves.add_topicmove",
                                               "moves.rollback_topicmove"}))
# Single sign-on (OIDC, LDAP): creates the users a directory sends, applies the group mapping to their roles
# and teams at every login and LDAP sync, deactivates users the directory no longer has (docs/sso.md).
SSO = SystemActor("system:sso", frozenset({"auth.add_user", "auth.change_user", "accounts.change_team",
                                           "accounts.delete_apitoken"}))
# The hourly sweep of expired API tokens (apps.accounts.tasks): deletes them, one audit record each.
TOKEN_SWEEP = SystemActor("system:token-sweep")
# Rebalances (apps.rebalancing): the worker's steps rewrite partition placements in ZooKeeper and record progress.
REBALANCE = SystemActor("system:rebalance", frozenset({"rebalancing.change_rebalance"}))
