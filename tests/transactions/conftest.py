"""Fixtures of the transaction tests: the governance cast and clusters, plus the broker fixtures."""

from tests.governance.conftest import (  # noqa: F401  (fixtures)
    approved_topic,
    make_cluster,
    people,
    topic_fields,
)
