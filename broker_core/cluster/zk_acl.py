"""ZooKeeper digest credentials and the ACL every node of a cluster's chroot should carry.

Three kinds of ZooKeeper client reach a cluster (docs/security.md, "ZooKeeper ACLs and application
secrets"):

- the control plane, with its digest credential: every right on the chroot and everything under it;
- the brokers, with theirs: read everything, create and delete their own `/brokers/<node-id>`;
- anyone else (the SDK's discovery, an operator's zkCli): read `/meta`, `/brokers` and its children,
  `/routes` and its children (where each topic's clients send and subscribe: cluster names and ZooKeeper
  addresses, docs/routing.md), and the chroot itself. Nothing under `/apps` (the secret hashes),
  `/topics`, `/bindings` or `/grants`.

A credential is `user:password`, read with `read_secret` (a variable or a mode-600 file, never argv):
`SWITCHYARD_ZK_CONTROL_AUTH` for the control plane and `SWITCHYARD_ZK_BROKER_AUTH` for a broker. The
control plane needs only the broker credential's digest for the ACLs it writes: `SWITCHYARD_ZK_BROKER_DIGEST`
(`user:base64 sha1`, as `make_digest_acl_credential` gives), or it computes it from the broker credential.
This module does no I/O beyond reading those secrets.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass

from kazoo.security import ACL, ANYONE_ID_UNSAFE, Id, Permissions, make_digest_acl_credential

from broker_core.layout import LAYOUT
from broker_core.secret_source import read_secret

CONTROL_AUTH = "SWITCHYARD_ZK_CONTROL_AUTH"
BROKER_AUTH = "SWITCHYARD_ZK_BROKER_AUTH"
BROKER_DIGEST = "SWITCHYARD_ZK_BROKER_DIGEST"
# during a credential rotation only (docs/security.md): the identity being replaced
CONTROL_PREVIOUS_AUTH = "SWITCHYARD_ZK_CONTROL_PREVIOUS_AUTH"
BROKER_PREVIOUS_DIGEST = "SWITCHYARD_ZK_BROKER_PREVIOUS_DIGEST"

_USER = re.compile(r"^[A-Za-z0-9._-]{1,64}$")
_DIGEST = re.compile(r"^[A-Za-z0-9._-]{1,64}:[A-Za-z0-9+/]{27}=$")


class ZkCredentialError(ValueError):
    pass


@dataclass(frozen=True)
class ZkCredential:
    user: str
    password: str

    @classmethod
    def parse(cls, value: str, what: str) -> ZkCredential:
        user, sep, password = value.strip().partition(":")
        if not sep or not _USER.match(user) or len(password) < 16:
            raise ZkCredentialError(f"{what} must be `user:password` (user of letters, digits, . _ -; a password "
                                    f"of at least 16 characters)")
        return cls(user, password)

    @property
    def auth_data(self) -> list[tuple[str, str]]:
        """For KazooClient(auth_data=...): the session authenticates as this identity."""
        return [("digest", f"{self.user}:{self.password}")]

    @property
    def acl_id(self) -> str:
        """The identity as a digest ACL names it (`user:base64 sha1(user:password)`)."""
        return make_digest_acl_credential(self.user, self.password)

    def __repr__(self) -> str:  # never the password, not even in a traceback
        return f"ZkCredential(user={self.user!r})"


def _credential(name: str, environ: Mapping[str, str] | None) -> ZkCredential | None:
    value = read_secret(name, environ)
    return ZkCredential.parse(value, name) if value else None


def control_credential(environ: Mapping[str, str] | None = None) -> ZkCredential | None:
    return _credential(CONTROL_AUTH, environ)


def control_previous_credential(environ: Mapping[str, str] | None = None) -> ZkCredential | None:
    """The control plane's former credential while it is rotated: the session authenticates with it too, so
    it can still change the nodes whose ACL names the former identity, and give them the new one."""
    return _credential(CONTROL_PREVIOUS_AUTH, environ)


def broker_credential(environ: Mapping[str, str] | None = None) -> ZkCredential | None:
    return _credential(BROKER_AUTH, environ)


def _digest(name: str, environ: Mapping[str, str] | None) -> str | None:
    digest = read_secret(name, environ)
    if not digest:
        return None
    if not _DIGEST.match(digest.strip()):
        raise ZkCredentialError(f"{name} must be `user:<base64 sha1>` (28 characters after the colon)")
    return digest.strip()


def broker_previous_acl_id(environ: Mapping[str, str] | None = None) -> str | None:
    """The brokers' former identity while their credential is rotated: it keeps read access meanwhile."""
    return _digest(BROKER_PREVIOUS_DIGEST, environ)


def broker_acl_id(environ: Mapping[str, str] | None = None) -> str | None:
    """The brokers' identity for the ACLs the control plane writes: the digest, or computed from the credential."""
    digest = _digest(BROKER_DIGEST, environ)
    if digest:
        return digest
    credential = broker_credential(environ)
    return credential.acl_id if credential else None


READ = Permissions.READ
ALL = Permissions.ALL
BROKER_REGISTRY = Permissions.READ | Permissions.CREATE | Permissions.DELETE


@dataclass(frozen=True)
class AclPolicy:
    """The ACL each path should carry, for one control-plane identity and one broker identity."""

    control_id: str
    broker_id: str
    previous_broker_id: str | None = None  # while the brokers' credential is rotated: both may read

    def _control(self) -> ACL:
        return ACL(ALL, Id("digest", self.control_id))

    def _broker(self, perms: int) -> list[ACL]:
        ids = [self.broker_id] + ([self.previous_broker_id] if self.previous_broker_id else [])
        return [ACL(perms, Id("digest", broker_id)) for broker_id in ids]

    def for_path(self, relative: str) -> list[ACL]:
        """`relative` is a path under the chroot ("" for the chroot itself and for its ancestors)."""
        return list(self._acl(_category(relative)))

    def matches(self, relative: str, acl: list[ACL]) -> bool:
        """Whether `acl` (as ZooKeeper answered it) is the one `relative` should carry. ZooKeeper masks the
        hash of a digest id (`user:x`) for a reader without ADMIN on the node: then the user name decides."""
        want, have = self._canonical(_category(relative)), _canonical(acl)
        return len(want) == len(have) and all(_same(w, h) for w, h in zip(want, have, strict=True))

    @functools.cache  # noqa: B019  (a handful of entries per policy, and policies live as long as a session)
    def _acl(self, category: str) -> tuple[ACL, ...]:
        if category == "discovery":  # the chroot, /meta, /routes, /placement and their children
            return (self._control(), ACL(READ, ANYONE_ID_UNSAFE))
        if category == "partition-state":  # /partition-state, /drained and below: the brokers write there
            return (self._control(), *self._broker(ALL), ACL(READ, ANYONE_ID_UNSAFE))
        if category == "registry":  # /brokers
            return (self._control(), *self._broker(BROKER_REGISTRY), ACL(READ, ANYONE_ID_UNSAFE))
        if category == "broker-node":
            return tuple(broker_node_acl(self.broker_id))
        # /apps (secret hashes), /topics, /bindings, /grants and anything else: the two identities only
        return (self._control(), *self._broker(READ))

    @functools.cache  # noqa: B019
    def _canonical(self, category: str) -> list[tuple[int, str, str, str]]:
        return _canonical(self._acl(category))


def _category(relative: str) -> str:
    if relative in ("", LAYOUT.META, LAYOUT.ROUTES, LAYOUT.PLACEMENT) or relative.startswith(
            (LAYOUT.ROUTES + "/", LAYOUT.PLACEMENT + "/")):
        return "discovery"
    if relative in (LAYOUT.PARTITION_STATE, LAYOUT.DRAINED) or relative.startswith(
            (LAYOUT.PARTITION_STATE + "/", LAYOUT.DRAINED + "/")):
        return "partition-state"
    if relative == LAYOUT.BROKERS:
        return "registry"
    if relative.startswith(LAYOUT.BROKERS + "/"):
        return "broker-node"
    return "private"


def broker_node_acl(broker_id: str) -> list[ACL]:
    """A broker's own ephemeral registration: it may change it, anyone may read it (discovery)."""
    return [ACL(ALL, Id("digest", broker_id)), ACL(READ, ANYONE_ID_UNSAFE)]


def _canonical(acl: list[ACL]) -> list[tuple[int, str, str, str]]:
    def key(a: ACL) -> tuple[int, str, str, str]:
        user, _, secret = a.id.id.partition(":") if a.id.scheme == "digest" else (a.id.id, "", "")
        return int(a.perms), a.id.scheme, user, secret
    return sorted(key(a) for a in acl)


def _same(want: tuple[int, str, str, str], have: tuple[int, str, str, str]) -> bool:
    return want[:3] == have[:3] and (want[3] == have[3] or have[3] == "x")


def describe(acl: list[ACL]) -> str:
    """`digest:switchyard-control=ALL, world:anyone=READ` (user names only, never a hash)."""
    parts = []
    for a in sorted(acl, key=lambda a: (a.id.scheme, a.id.id)):
        who = a.id.id.split(":", 1)[0] if a.id.scheme == "digest" else a.id.id
        parts.append(f"{a.id.scheme}:{who}={'|'.join(a.acl_list) or 'NONE'}")
    return ", ".join(parts)
