from control_plane.choices import text_choices

# What an alarm rule watches; each kind's threshold means one thing (docs/alerts.md).
RuleKind = text_choices("RuleKind", ("lag_age", "Oldest waiting message older than (seconds)"),
                        ("backlog", "Backlog larger than (messages)"), ("no_consumers", "Fewer consumers than (consumers)"),
                        ("auth_failures", "Authentication failures in 5 minutes above"),
                        ("unresolved_tx", "Unresolved transaction messages above"),
                        ("broker_down", "Fewer live brokers than"), ("zookeeper_drift", "ZooKeeper nodes drifted above"),
                        ("under_replicated", "Under-replicated partitions above"),
                        ("trace_dropped", "Trace events dropped in 5 minutes above"))


# kinds that watch a topic (and, for the first three, a consumer group); the rest watch a whole cluster
TOPIC_KINDS = {RuleKind.LAG_AGE, RuleKind.BACKLOG, RuleKind.NO_CONSUMERS, RuleKind.UNRESOLVED_TX}
GROUP_KINDS = {RuleKind.LAG_AGE, RuleKind.BACKLOG, RuleKind.NO_CONSUMERS}
DEFAULT_THRESHOLDS = {RuleKind.NO_CONSUMERS: 1, RuleKind.BROKER_DOWN: 1}


AlertStatus = text_choices("AlertStatus", "firing", "resolved")
