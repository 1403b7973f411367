"""Which applications wait for whom, decided in SQL (a few queries whatever the length of the queue)."""

from __future__ import annotations

import re

from django.db.models import CharField, Exists, OuterRef, Q, QuerySet, Value
from django.db.models.functions import Coalesce

from apps.accounts.roles import ADMIN, has_role
from apps.governance.workflow import (
    REFERENCE_RE,
    SRE_APPROVAL_PERM,
    Slot,
    State,
    Verdict,
    application_models,
)


def awaiting_filter(queryset: QuerySet, user) -> QuerySet:
    """Narrow one kind's queryset to the pending applications `user` could decide now — the same rule as
    workflow.decidable_slots: not their own, not decided by them yet, and an open slot they may fill."""
    model = queryset.model
    if user is None or not user.is_authenticated:
        return queryset.none()
    decisions = model.decisions.rel.related_model.objects.filter(application=OuterRef("pk"))

    def open_slot(slot: str) -> Q:
        filled = Exists(decisions.filter(slot=slot, verdict=Verdict.APPROVE))
        return Q(required_slots__contains=[slot]) & ~Q(filled)

    fillable = Q(pk__in=[])
    if user.has_perm(model.approve_perm):
        owner = open_slot(Slot.OWNER)
        if not has_role(user, ADMIN):
            owner &= Q(**{f"{model.team_lookup}__in": user.teams.values("pk")})
        fillable |= owner
    if user.has_perm(SRE_APPROVAL_PERM):
        fillable |= open_slot(Slot.SRE)
    return (queryset.filter(state=State.PENDING).exclude(applicant=user)
            .exclude(Exists(decisions.filter(actor=user))).filter(fillable))


def awaiting_keys(user) -> QuerySet:
    """(kind, pk, submitted) of every application `user` could decide now, oldest first: one UNION, which
    a paginator counts and slices in the database."""
    parts = [awaiting_filter(model.objects.all(), user)
             .annotate(queue_kind=Value(model.kind, output_field=CharField()),
                       queued_at=Coalesce("submitted_at", "created_at"))
             .values_list("queue_kind", "pk", "queued_at")
             for model in application_models()]
    return parts[0].union(*parts[1:], all=True).order_by("queued_at", "queue_kind", "pk")


def load(keys) -> list:
    """The applications behind a page of awaiting_keys, in that order (one query per kind on the page)."""
    keys = list(keys)
    found = {}
    for model in application_models():
        ids = [pk for kind, pk, _ in keys if kind == model.kind]
        if ids:
            for a in (model.objects.filter(pk__in=ids).select_related(*model.list_related)
                      .prefetch_related("decisions__actor")):
                found[(model.kind, a.pk)] = a
    return [found[(kind, pk)] for kind, pk, _ in keys if (kind, pk) in found]


def awaiting(user) -> list:
    """Every pending application `user` could approve now, oldest first (never their own)."""
    return load(awaiting_keys(user))


def of_applicant(user) -> list:
    out = []
    for model in application_models():
        out += list(model.objects.filter(applicant=user).select_related(*model.list_related)
                    .prefetch_related("decisions"))
    return sorted(out, key=lambda a: a.created_at, reverse=True)


def find(ref: str):
    """The application a number names ("T-12", "t-12" or "12"), whatever its kind; None when there is none (or
    the letter is not its kind's)."""
    match = re.fullmatch(REFERENCE_RE, ref.strip().upper()) or re.fullmatch(r"(?P<number>[0-9]{1,18})", ref.strip())
    if match is None:
        return None
    number = int(match.group("number"))
    for model in application_models():
        application = model.objects.filter(number=number).select_related(*model.list_related).first()
        if application is not None:
            prefix = match.groupdict().get("prefix")
            return application if prefix in (None, application.prefix) else None
    return None
