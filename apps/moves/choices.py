from control_plane.choices import text_choices

MoveState = text_choices("MoveState", "running", "rolling_back", "succeeded", "rolled_back",
                         ("failed", "Failed (resume it or roll it back)"))


# A move in one of these states holds its topic: no second move of it starts.
OPEN_STATES = (MoveState.RUNNING, MoveState.ROLLING_BACK, MoveState.FAILED)
# The worker advances a move in one of these states.
ACTIVE_STATES = (MoveState.RUNNING, MoveState.ROLLING_BACK)


Step = text_choices("Step", "checks", ("provision", "Provision on the target"),
                    ("consume_both", "Consumers on both clusters"), ("switch_producers", "Producers to the target"),
                    ("drain", "Drain the source"), ("cutover", "Cut-over"), ("deprovision", "Deprovision the source"),
                    ("rb_producers", "Rollback: producers to the source"), ("rb_drain", "Rollback: drain the target"),
                    ("rb_cutover", "Rollback: consumers off the target"),
                    ("rb_deprovision", "Rollback: deprovision the target"))


FORWARD = [Step.CHECKS, Step.PROVISION, Step.CONSUME_BOTH, Step.SWITCH_PRODUCERS, Step.DRAIN, Step.CUTOVER,
           Step.DEPROVISION]
ROLLBACK = [Step.RB_PRODUCERS, Step.RB_DRAIN, Step.RB_CUTOVER, Step.RB_DEPROVISION]


StepState = text_choices("StepState", "pending", "running", "done", ("skipped", "Skipped (rolled back before it)"),
                         "failed")
DeadLetters = text_choices("DeadLetters", ("move", "Move them to the target"),
                           ("discard", "Discard them with the source"))
