"""Replication of a topic's partitions between the brokers of a cluster (issue 20, item 2)."""
