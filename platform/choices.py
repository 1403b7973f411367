"""One way to declare the choices of a field (a Django TextChoices), and the choice sets several apps share.

A member is named by its value in capitals and labelled by its value in words ("rolled_back" is ROLLED_BACK,
"Rolled back") unless it is given as (value, label): no member spells its value three times.
"""

from __future__ import annotations

import sys

from django.db import models


def text_choices(name: str, *members: str | tuple[str, str]) -> type[models.TextChoices]:
    """`text_choices("MoveState", "running", ("failed", "Failed (resume it or roll it back)"))` is the class

        class MoveState(models.TextChoices):
            RUNNING = "running", "Running"
            FAILED = "failed", "Failed (resume it or roll it back)"
    """
    pairs = [(m, m.replace("_", " ").capitalize()) if isinstance(m, str) else m for m in members]
    # the declaring module, as a class statement records it (for repr and pickling)
    module = sys._getframe(1).f_globals["__name__"]
    return models.TextChoices(name, [(value.upper(), (value, label)) for value, label in pairs], module=module)


# The state of a background run (a trace index build, a dead-letter re-drive).
RunState = text_choices("RunState", "queued", "running", "succeeded", "failed")
