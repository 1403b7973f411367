"""The alerts page (firing alerts from Alertmanager, the history the control plane kept, rules, silences), the
silence forms, and /alerts/notify, where Alertmanager posts every notification (monitoring token only)."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils.decorators import method_decorator
from django.views import View
from django.views.decorators.csrf import csrf_exempt

from apps.alerts import actions, alertmanager
from apps.alerts.forms import AlertRuleForm
from apps.alerts.history import BadNotification, record_notification
from apps.alerts.models import AlertEvent, AlertRule
from control_plane.errors import ActionError
from control_plane.metrics import refuse_unless_monitoring
from control_plane.web import apply_validation_error

NOTIFY_MAX_BYTES = 4 * 1024 * 1024
HISTORY_ROWS = 100


class AlertsView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "alerts.view_alertrule"
    raise_exception = True

    def get(self, request):
        firing, silences, error = [], [], ""
        try:
            firing = alertmanager.alerts()
            silences = [s for s in alertmanager.silences() if s.get("status", {}).get("state") != "expired"]
        except ActionError as exc:
            error = exc.message
        rules = {str(r.pk): r for r in AlertRule.objects.select_related("cluster", "topic")}
        for alert in firing:
            alert["rule_obj"] = rules.get(alert.get("labels", {}).get("rule_id", ""))
            alert["label_text"] = ", ".join(f"{k}={v}" for k, v in sorted(alert.get("labels", {}).items())
                                            if k not in ("alertname", "rule_id"))
        for silence in silences:
            silence["matcher_text"] = ", ".join(f"{m['name']}={m['value']}" for m in silence.get("matchers", []))
        return render(request, "alerts/alerts.html", {
            "firing": firing, "silences": silences, "alertmanager_error": error,
            "history": AlertEvent.objects.select_related("rule")[:HISTORY_ROWS],
            "rules": sorted(rules.values(), key=lambda r: (r.cluster.name, r.name)),
            "can_silence": request.user.has_perm("alerts.silence_alertevent"),
            "can_add": request.user.has_perm("alerts.add_alertrule"),
        })


class RuleFormView(LoginRequiredMixin, PermissionRequiredMixin, View):
    """GET: the form (empty, or the rule's); POST: add or change the rule through the action, or show the form
    again with its field errors (nothing changed)."""

    permission_required = "alerts.add_alertrule"
    raise_exception = True

    def get(self, request, pk=None):
        rule = get_object_or_404(AlertRule, pk=pk) if pk else None
        initial = {f: getattr(rule, f) for f in actions.EDITABLE_FIELDS} if rule else None
        return self._page(request, AlertRuleForm(initial=initial), rule)

    def post(self, request, pk=None):
        rule = get_object_or_404(AlertRule, pk=pk) if pk else None
        form = AlertRuleForm(request.POST)
        if form.is_valid():
            try:
                if rule is None:
                    rule = actions.create_rule(actor=request.user, **form.fields_for_action())
                else:
                    rule = actions.update_rule(actor=request.user, rule=rule, **form.fields_for_action())
            except ValidationError as exc:
                apply_validation_error(form, exc)
            except PermissionDenied as exc:
                form.add_error(None, str(exc))
            else:
                messages.success(request, f"Alarm rule {rule.name} saved.")
                return redirect("alerts:list")
        return self._page(request, form, rule, status=400)

    def _page(self, request, form, rule, status=200):
        return render(request, "alerts/rule_form.html", {"form": form, "rule": rule}, status=status)


class RuleDeleteView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "alerts.delete_alertrule"
    raise_exception = True

    def post(self, request, pk):
        rule = get_object_or_404(AlertRule, pk=pk)
        try:
            actions.delete_rule(actor=request.user, rule=rule)
        except PermissionDenied as exc:
            messages.error(request, str(exc))
        else:
            messages.success(request, f"Alarm rule {rule.name} removed.")
        return redirect("alerts:list")


class SilenceCreateView(LoginRequiredMixin, View):
    """POST rule_id (or label/value), hours, comment: silence that rule's alerts in Alertmanager."""

    raise_exception = True

    def post(self, request):
        matchers = {}
        if request.POST.get("rule_id"):
            matchers["rule_id"] = request.POST["rule_id"]
        try:
            hours = float(request.POST.get("hours", ""))
        except ValueError:
            hours = -1
        try:
            silence_id = actions.create_silence(actor=request.user, matchers=matchers, hours=hours,
                                                comment=request.POST.get("comment", ""))
        except ValidationError as exc:
            messages.error(request, "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.message_dict.items()))
        except ActionError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Silence {silence_id} created.")
        return redirect("alerts:list")


class SilenceExpireView(LoginRequiredMixin, View):
    raise_exception = True

    def post(self, request, silence_id):
        try:
            actions.expire_silence(actor=request.user, silence_id=silence_id)
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
        except ActionError as exc:
            messages.error(request, exc.message)
        else:
            messages.success(request, f"Silence {silence_id} expired.")
        return redirect("alerts:list")


@method_decorator(csrf_exempt, name="dispatch")  # a machine caller with a bearer token, no session
class NotifyView(View):
    def post(self, request):
        refused = refuse_unless_monitoring(request)
        if refused is not None:
            return refused
        if int(request.headers.get("Content-Length") or 0) > NOTIFY_MAX_BYTES:
            return JsonResponse({"error": "too_large"}, status=413)
        try:
            count = record_notification(json.loads(request.body))
        except (ValueError, BadNotification) as exc:
            return JsonResponse({"error": "bad_notification", "message": str(exc)[:200]}, status=400)
        return JsonResponse({"recorded": count})
