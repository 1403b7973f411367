"""The Django admin writes through the actions layer too, and cannot touch the audit log."""

import pytest

from apps.audit.models import AuditRecord
from apps.clusters.models import Cluster

pytestmark = pytest.mark.django_db


def test_admin_cluster_create_and_edit_are_audited(client, make_user):
    admin = make_user("root-1", "admin", superuser=True)
    client.force_login(admin)
    form = {"name": "adm-1", "environment": "dev", "region": "r1", "zk_connect": "127.0.0.1:1",
            "zk_chroot": "/adm", "storage_level": "memory", "description": "", "status": "active"}
    response = client.post("/admin/clusters/cluster/add/", form)
    assert response.status_code == 302, response.content[:2000]
    cluster = Cluster.objects.get(name="adm-1")
    response = client.post(f"/admin/clusters/cluster/{cluster.pk}/change/", {**form, "region": "r2"})
    assert response.status_code == 302
    assert Cluster.objects.get(pk=cluster.pk).region == "r2"
    actions = list(AuditRecord.objects.order_by("id").values_list("action", "source", "actor_name"))
    assert actions == [("cluster.create", "web", "root-1"), ("cluster.update", "web", "root-1")]
    update = AuditRecord.objects.get(action="cluster.update")
    assert (update.before["region"], update.after["region"]) == ("r1", "r2")


def test_admin_offers_no_change_or_delete_of_audit_records(client, make_user):
    admin = make_user("root-1", "admin", superuser=True)
    client.force_login(admin)
    client.post("/admin/clusters/cluster/add/", {"name": "adm-1", "environment": "dev", "region": "r1",
                                                 "zk_connect": "127.0.0.1:1", "zk_chroot": "/adm",
                                                 "storage_level": "memory", "status": "active"})
    record = AuditRecord.objects.get()
    assert client.get("/admin/audit/auditrecord/add/").status_code == 403
    assert client.get(f"/admin/audit/auditrecord/{record.pk}/delete/").status_code == 403
    response = client.post(f"/admin/audit/auditrecord/{record.pk}/change/", {"actor_name": "mallory"})
    assert response.status_code == 403
    assert AuditRecord.objects.get().actor_name == "root-1"
