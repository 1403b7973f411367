from control_plane.choices import text_choices

RebalanceState = text_choices("RebalanceState", "running", "succeeded",
                              ("failed", "Failed (resume it or abandon it)"),
                              ("abandoned", "Abandoned"))

# A rebalance in one of these states holds its cluster: no second one starts there.
OPEN_STATES = (RebalanceState.RUNNING, RebalanceState.FAILED)
# The worker advances a rebalance in one of these states.
ACTIVE_STATES = (RebalanceState.RUNNING,)

# The three phases of each step: add the target as a follower, wait until it is in sync, drop the source.
Phase = text_choices("Phase", ("add", "Add the new replica"), ("catch_up", "Wait until it is in sync"),
                     ("drop", "Drop the old replica"))
PHASES = [Phase.ADD, Phase.CATCH_UP, Phase.DROP]
