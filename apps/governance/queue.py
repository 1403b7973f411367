"""Which applications wait for whom."""

from __future__ import annotations

from apps.governance.workflow import State, decidable_slots


def application_models():
    from apps.bindings.models import BindingApplication, GrantApplication
    from apps.topics.models import TopicApplication

    return [TopicApplication, BindingApplication, GrantApplication]


def _related(model):
    if model.kind == "topic":
        return ["team", "cluster", "applicant"]
    return ["topic__team", "topic__cluster", "app", "applicant"]


def awaiting(user) -> list:
    """Pending applications `user` could approve now, oldest first (never their own)."""
    out = []
    for model in application_models():
        pending = (model.objects.filter(state=State.PENDING).exclude(applicant=user)
                   .select_related(*_related(model)).prefetch_related("decisions"))
        out += [a for a in pending if decidable_slots(user, a)]
    return sorted(out, key=lambda a: a.submitted_at or a.created_at)


def of_applicant(user) -> list:
    out = []
    for model in application_models():
        out += list(model.objects.filter(applicant=user).select_related(*_related(model))
                    .prefetch_related("decisions"))
    return sorted(out, key=lambda a: a.created_at, reverse=True)
