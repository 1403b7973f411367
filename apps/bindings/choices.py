from control_plane.choices import text_choices

# KiteQ's bind types: which message types of the topic a group receives.
SelectorKind = text_choices("SelectorKind", ("exact", "Exact message type"),
                            ("wildcard", "Wildcard (shell-style, e.g. order.*)"),
                            ("regex", "Regular expression (full match)"))
DeliveryMode = text_choices("DeliveryMode", ("clustering", "Clustering: one consumer of the group per message"),
                            ("broadcast", "Broadcast: every consumer of the group"))
# Ordered topics (docs/ordered-topics.md): what a message past the delivery limit does to its key.
OnFailure = text_choices("OnFailure", ("block", "Block the key: deliver the message again until it is acknowledged"),
                         ("dead_letter", "Dead-letter the message at the delivery limit and go on with the key"))
BindingStatus = text_choices("BindingStatus", "active", "retired")
