from control_plane.choices import text_choices

# retired: new publishes refused, bindings drain, data kept until deleted; deleted: its data is gone from every
# cluster and the name is free again
TopicStatus = text_choices("TopicStatus", "active", "retired", "deleted")
