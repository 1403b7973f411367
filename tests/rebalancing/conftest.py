"""Fixtures of the rebalance tests: the cast (tests.governance), and for the live test the broker test cluster and
a governed topic on it (tests.integration)."""

from tests.broker.conftest import cluster, zk, zk_hosts  # noqa: F401  (the broker fixtures)
from tests.governance.conftest import approved_topic, people, topic_fields  # noqa: F401  (fixtures)
