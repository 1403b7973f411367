from apps.audit.api.views import AuditRecordViewSet


def register(router) -> None:
    router.register("audit-records", AuditRecordViewSet, basename="audit-record")
