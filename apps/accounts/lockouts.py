"""Login lock-outs (django-axes): audited when they happen, listed for admins, lifted by an audited action.

Axes counts failed logins per username and client address (settings AXES_*); once a pair reaches the limit,
its logins are refused, right password or not, until the cool-off ends or an admin lifts the lock-out.
"""

from __future__ import annotations

import logging

from axes.helpers import get_cool_off
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.conf import settings
from django.dispatch import receiver
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone

from apps.audit.recorder import audited, record
from control_plane import actors
from control_plane.errors import ActionError, require_perm

log = logging.getLogger(__name__)

LOCKOUT_MESSAGE = ("Too many failed logins for this username from your address: logins are refused for "
                   "{minutes} minutes, even with the right password. An admin can lift the lock-out sooner.")


def _minutes() -> int:
    cool_off = get_cool_off()
    return int(cool_off.total_seconds() // 60) if cool_off else 0


def lockout_response(request, original_response=None, credentials=None):
    """Axes' answer to a locked-out login: JSON for the API, the lock-out page for the web (both 429)."""
    message = LOCKOUT_MESSAGE.format(minutes=_minutes())
    if request.path.startswith("/api/"):
        return JsonResponse({"detail": message}, status=429)
    return render(request, "registration/locked_out.html", {"message": message}, status=429)


def active_lockouts():
    """Attempt records at or over the failure limit whose cool-off has not ended."""
    qs = AccessAttempt.objects.filter(failures_since_start__gte=settings.AXES_FAILURE_LIMIT)
    cool_off = get_cool_off()
    if cool_off:
        qs = qs.filter(attempt_time__gte=timezone.now() - cool_off)
    return qs.order_by("-attempt_time")


def _state(attempt: AccessAttempt) -> dict:
    return {"username": attempt.username, "ip_address": attempt.ip_address, "failures": attempt.failures_since_start,
            "last_attempt": attempt.attempt_time.isoformat() if attempt.attempt_time else None}


@receiver(user_locked_out, dispatch_uid="switchyard_audit_lockout")
def audit_lockout(sender, request=None, username=None, ip_address=None, **kwargs) -> None:
    """One audit record when a pair reaches the limit (later refused attempts only extend the cool-off)."""
    failures = getattr(request, "axes_failures_since_start", None)
    if failures is not None and failures != settings.AXES_FAILURE_LIMIT:
        return
    log.warning("login locked out", extra={"username": username, "ip_address": ip_address, "failures": failures})
    _record_lockout(username=username, ip_address=ip_address, failures=failures)


@audited
def _record_lockout(*, username, ip_address, failures) -> None:
    record(actor=actors.LOGIN_GUARD, action="login.locked_out", object_type="auth.user", object_id=username or "",
           object_repr=f"{username} from {ip_address}"[:200],
           after={"username": username, "ip_address": ip_address, "failures": failures,
                  "cool_off_minutes": _minutes()})


@audited
def lift_lockout(*, actor, attempt: AccessAttempt) -> int:
    """Lift the lock-out of one username and address: their failed attempts are forgotten. Returns how many
    attempt records were removed."""
    require_perm(actor, "axes.delete_accessattempt")
    attempts = AccessAttempt.objects.select_for_update().filter(username=attempt.username,
                                                                ip_address=attempt.ip_address)
    rows = list(attempts)
    if not rows:
        raise ActionError(f"{attempt.username} from {attempt.ip_address} is not locked out any more.")
    before = _state(max(rows, key=lambda a: a.failures_since_start))
    removed, _ = AccessAttempt.objects.filter(pk__in=[a.pk for a in rows]).delete()
    record(actor=actor, action="login.lockout_lifted", object_type="auth.user", object_id=attempt.username or "",
           object_repr=f"{attempt.username} from {attempt.ip_address}"[:200], before=before,
           after={"attempts_removed": removed})
    return removed
