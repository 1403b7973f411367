"""The drain markers of ordered topics' rescales in ZooKeeper (layout: `Layout.drained`, `drain_marker`): read
and written by the brokers (docs/ordered-topics.md). Blocking kazoo calls: run them off the event loop."""

from __future__ import annotations

import logging

from kazoo.exceptions import KazooException, NodeExistsError, NoNodeError

from broker_core.layout import LAYOUT

log = logging.getLogger("broker_core.cluster")


class DrainMarks:
    def __init__(self, client, root: str, acl):
        self.client = client  # the broker's kazoo client (membership)
        self.root = root  # the cluster's chroot
        self.acl = acl  # a marker's ACL: the broker may change it, anyone may read it

    def read(self, topic: str, version: int) -> set[str] | None:
        """The markers written for that mapping version (none yet: an empty set); None when ZooKeeper did not
        answer (the caller keeps what it knew: moved keys keep waiting)."""
        try:
            return set(self.client.get_children(self.root + LAYOUT.drained(topic, version)))
        except NoNodeError:
            return set()
        except KazooException as exc:
            log.warning("drain markers of %s v%d not read: %s", topic, version, exc)
            return None

    def write(self, topic: str, version: int, names: list[str]) -> list[str]:
        """Create these markers (each says: this group finished that old partition); returns those now there."""
        done = []
        for name in names:
            path = f"{self.root}{LAYOUT.drained(topic, version)}/{name}"
            try:
                self.client.create(path, b"{}", acl=self.acl)
            except NodeExistsError:
                pass
            except NoNodeError:
                log.warning("%s is missing: the control plane makes it with the placement of mapping version %d; "
                            "marker %s not written", LAYOUT.drained(topic, version), version, name)
                continue
            except KazooException as exc:
                log.warning("drain marker %s of %s v%d not written: %s", name, topic, version, exc)
                continue
            done.append(name)
        return done
