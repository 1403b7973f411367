"""The governance audit log's search page and CSV export (read-only)."""

from django.contrib.auth.mixins import LoginRequiredMixin, PermissionRequiredMixin
from django.views import View
from django.views.generic import DetailView, ListView

from apps.audit.export import export_audit
from apps.audit.filtersets import AuditRecordFilterSet
from apps.audit.models import AuditRecord


class AuditLogView(LoginRequiredMixin, PermissionRequiredMixin, ListView):
    permission_required = "audit.view_auditrecord"
    raise_exception = True
    template_name = "audit/auditrecord_list.html"
    paginate_by = 50

    def get_queryset(self):
        self.filterset = AuditRecordFilterSet(self.request.GET or None, queryset=AuditRecord.objects.order_by("-id"))
        return self.filterset.qs if self.filterset.is_bound and self.filterset.is_valid() else \
            AuditRecord.objects.order_by("-id")

    def get_context_data(self, **kwargs):
        query = self.request.GET.copy()
        query.pop("page", None)
        return super().get_context_data(filterset=self.filterset, query=query.urlencode(), **kwargs)


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
