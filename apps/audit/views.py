"""The governance audit log's search page, a record's page and the CSV export (read-only)."""

from dataclasses import dataclass

from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.views import View
from django.views.generic import DetailView, ListView

from apps.audit import diff, routine
from apps.audit.export import export_audit
from apps.audit.filtersets import AuditRecordFilterSet
from apps.audit.models import AuditRecord


@dataclass(frozen=True)
class Row:
    record: AuditRecord
    summary: str
    routine: bool


class AuditLogView(LoginRequiredMixin, PermissionRequiredMixin, ListView):
    """Newest first, 50 a page; routine events hidden and shown as counted groups between the records they fall
    between, unless the "show routine events" filter is on."""

    permission_required = "audit.view_auditrecord"
    raise_exception = True
    template_name = "audit/auditrecord_list.html"
    paginate_by = 50

    def get_queryset(self):
        self.filterset = AuditRecordFilterSet(self.request.GET, queryset=AuditRecord.objects.order_by("-id"))
        return self.filterset.qs if self.filterset.is_valid() else AuditRecord.objects.none()

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        query = self.request.GET.copy()
        query.pop("page", None)
        records = list(context["object_list"])
        groups = self.routine_groups(records, context["page_obj"])
        rows = [("group", g) for g in groups.get(None, [])]
        for r in records:
            rows.append(("record", Row(r, diff.summary(r.before, r.after), routine.is_routine(r))))
            rows.extend(("group", g) for g in groups.get(r.pk, []))
        context.update(filterset=self.filterset, query=query.urlencode(), rows=rows,
                       routine_hidden=sum(g.count for found in groups.values() for g in found))
        return context

    def routine_groups(self, records, page) -> dict:
        """{shown record id (None: above the first) → its groups}, for the records of this page."""
        if not self.filterset.is_valid() or self.filterset.form.cleaned_data.get("show_routine"):
            return {}
        shown = self.filterset.qs
        ids = [r.pk for r in records]
        # this page shows the runs after each of its records, down to the next page's first record; the first
        # page also the run above its first record (newer than every shown one)
        above = None if page is None or page.number == 1 or not ids else ids[0]
        below = shown.filter(id__lt=ids[-1]).values_list("id", flat=True).first() if ids else None
        found = routine.groups(self.filterset.matching.filter(routine.routine_q()), ids, above, below)
        out: dict = {}
        for group in found:
            if group.after_id is None and above is not None:
                continue  # above this page's first record: the previous page showed it
            out.setdefault(group.after_id, []).append(group)
        return out


class AuditExportView(LoginRequiredMixin, PermissionRequiredMixin, View):
    permission_required = "audit.view_auditrecord"
    raise_exception = True

    def get(self, request):
        filterset = AuditRecordFilterSet(request.GET, queryset=AuditRecord.objects.order_by("-id"))
        return export_audit(filterset.qs if filterset.is_valid() else AuditRecord.objects.none())


class AuditRecordView(LoginRequiredMixin, PermissionRequiredMixin, DetailView):
    permission_required = "audit.view_auditrecord"
    raise_exception = True
    template_name = "audit/auditrecord_detail.html"
    model = AuditRecord
    context_object_name = "entry"

    def get_context_data(self, **kwargs):
        return super().get_context_data(changes=diff.changes(self.object.before, self.object.after),
                                        routine=routine.is_routine(self.object), **kwargs)
