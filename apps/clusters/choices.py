from control_plane.choices import text_choices

Environment = text_choices("Environment", ("dev", "Development"), "test", "staging", ("prod", "Production"))
StorageLevel = text_choices("StorageLevel", ("memory", "Memory (fast, lost on restart)"),
                            ("file", "File (durable, fsync group commit)"))
ClusterStatus = text_choices("ClusterStatus", "active", "maintenance", "retired")
