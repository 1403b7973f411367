"""Delivery: topics fan out to groups (`topic`), groups keep lanes, credit, in-flight messages, redelivery and
dead letters (`group`, `lanes`), the checks of a publish (`publish_rules`), transaction messages
(`transactions`), and the life of topics and bindings on this broker (`lifecycle`)."""
