from django.db import models


class MoveState(models.TextChoices):
    RUNNING = "running", "Running"
    ROLLING_BACK = "rolling_back", "Rolling back"
    SUCCEEDED = "succeeded", "Succeeded"
    ROLLED_BACK = "rolled_back", "Rolled back"
    FAILED = "failed", "Failed (resume it or roll it back)"


# A move in one of these states holds its topic: no second move of it starts.
OPEN_STATES = (MoveState.RUNNING, MoveState.ROLLING_BACK, MoveState.FAILED)
# The worker advances a move in one of these states.
ACTIVE_STATES = (MoveState.RUNNING, MoveState.ROLLING_BACK)


class Step(models.TextChoices):
    CHECKS = "checks", "Checks"
    PROVISION = "provision", "Provision on the target"
    CONSUME_BOTH = "consume_both", "Consumers on both clusters"
    SWITCH_PRODUCERS = "switch_producers", "Producers to the target"
    DRAIN = "drain", "Drain the source"
    CUTOVER = "cutover", "Cut-over"
    DEPROVISION = "deprovision", "Deprovision the source"
    RB_PRODUCERS = "rb_producers", "Rollback: producers to the source"
    RB_DRAIN = "rb_drain", "Rollback: drain the target"
    RB_CUTOVER = "rb_cutover", "Rollback: consumers off the target"
    RB_DEPROVISION = "rb_deprovision", "Rollback: deprovision the target"


FORWARD = [Step.CHECKS, Step.PROVISION, Step.CONSUME_BOTH, Step.SWITCH_PRODUCERS, Step.DRAIN, Step.CUTOVER,
           Step.DEPROVISION]
ROLLBACK = [Step.RB_PRODUCERS, Step.RB_DRAIN, Step.RB_CUTOVER, Step.RB_DEPROVISION]


class StepState(models.TextChoices):
    PENDING = "pending", "Pending"
    RUNNING = "running", "Running"
    DONE = "done", "Done"
    SKIPPED = "skipped", "Skipped (rolled back before it)"
    FAILED = "failed", "Failed"


class DeadLetters(models.TextChoices):
    MOVE = "move", "Move them to the target"
    DISCARD = "discard", "Discard them with the source"
