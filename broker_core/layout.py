"""The ZooKeeper layout shared by the control plane (writer) and the brokers (readers).

Paths are relative to a cluster's chroot. The layout is versioned: see docs/zookeeper-layout.md.
Every data node is UTF-8 JSON. This module does no I/O.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

LAYOUT_VERSION = 2


@dataclass(frozen=True)
class Layout:
    META: str = "/meta"
    BROKERS: str = "/brokers"
    TOPICS: str = "/topics"
    BINDINGS: str = "/bindings"
    APPS: str = "/apps"
    GRANTS: str = "/grants"
    ROUTES: str = "/routes"  # where a topic's clients send and subscribe (docs/routing.md); readable by anyone

    def broker(self, node_id: str) -> str:
        return f"{self.BROKERS}/{node_id}"

    def topic(self, topic: str) -> str:
        return f"{self.TOPICS}/{topic}"

    def topic_bindings(self, topic: str) -> str:
        return f"{self.BINDINGS}/{topic}"

    def binding(self, topic: str, group: str) -> str:
        return f"{self.BINDINGS}/{topic}/{group}"

    def app(self, app_id: str) -> str:
        return f"{self.APPS}/{app_id}"

    def topic_grants(self, topic: str) -> str:
        return f"{self.GRANTS}/{topic}"

    def grant(self, topic: str, app_id: str) -> str:
        return f"{self.GRANTS}/{topic}/{app_id}"

    def route(self, topic: str) -> str:
        return f"{self.ROUTES}/{topic}"


LAYOUT = Layout()


def encode(doc: dict) -> bytes:
    """Canonical JSON: sorted keys, so equal documents are equal bytes (drift checks compare them)."""
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def decode(data: bytes | None) -> dict:
    return json.loads(data) if data else {}
