from control_plane.choices import RunState, text_choices

TxState = text_choices("TxState", "prepared", "committed", "rolled_back",
                       ("unresolved", "Unresolved (rolled back after the last check)"))
Resolution = text_choices("Resolution", "commit", "rollback")
ResolutionSource = text_choices("ResolutionSource", ("producer", "Producer (commit or rollback by itself)"),
                                ("check", "Back-check answer"), ("exhausted", "Checks exhausted"),
                                ("manual", "By hand"))
CheckVia = text_choices("CheckVia", ("connection", "Producer connection (in-band)"), ("http", "HTTP check URL"),
                        ("none", "Nobody to ask"))
CheckAnswer = text_choices("CheckAnswer", "commit", "rollback", "unknown")
RedriveState = RunState
RedriveOperation = text_choices("RedriveOperation", ("redrive", "Re-drive"), ("delete", "Delete"))
