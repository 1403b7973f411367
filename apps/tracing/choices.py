from control_plane.choices import RunState, text_choices

__all__ = ["RunState", "RunTrigger", "TraceState"]

# What became of a message in a group (or, with no group, as a whole): docs/trace-events.md.
TraceState = text_choices("TraceState", "acked", ("dead_lettered", "Dead-lettered"), "expired", "retrying",
                          "in_flight", "pending", "rolled_back", ("prepared", "Prepared (transaction open)"),
                          "stored", "published")
RunTrigger = text_choices("RunTrigger", "schedule", ("manual", "Rebuild now"))
