"""The Django admin writes through the actions layer too, and cannot touch the audit log."""

import pytest

from apps.audit.models import AuditRecord
from apps.clusters.models import Cluster

pytestmark = pytest.mark.django_db


def test_admin_cluster_create_and_edit_are_audited(client, make_user):
    admin = make_user("root-1", "admin", superuser=True)
    client.force_login(admin)
    form = {"name": "adm-1", "environment": "dev", "region": "r1", "zk_connect": "127.0.0.1:1",
            "zk_chroot": "/adm", "storage_level": "memory", "description": "", "status": "active",
            "default_partitions": 1, "default_replication_factor": 1, "min_insync": 1}
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
                                                 "storage_level": "memory", "status": "active",
                                                 "default_partitions": 1, "default_replication_factor": 1,
                                                 "min_insync": 1})
    record = AuditRecord.objects.get()
    assert client.get("/admin/audit/auditrecord/add/").status_code == 403
    assert client.get(f"/admin/audit/auditrecord/{record.pk}/delete/").status_code == 403
    response = client.post(f"/admin/audit/auditrecord/{record.pk}/change/", {"actor_name": "mallory"})
    assert response.status_code == 403
    assert AuditRecord.objects.get().actor_name == "root-1"


def _records(**filters):
    return list(AuditRecord.objects.filter(**filters).order_by("id"))


def test_admin_user_create_and_change_go_through_the_actions(client, make_user):
    from django.contrib.auth.models import User

    client.force_login(make_user("root-1", "admin", superuser=True))
    response = client.post("/admin/auth/user/add/", {"username": "carol", "new_password": "long-enough-1",
                                                     "email": "carol@example.org", "roles": ["developer"]})
    assert response.status_code == 302, response.content[:2000]
    carol = User.objects.get(username="carol")
    [created] = _records(action="user.create")
    assert (created.actor_name, created.object_id, created.source) == ("root-1", str(carol.pk), "web")
    assert created.after == {"username": "carol", "email": "carol@example.org", "is_active": True,
                             "is_staff": False, "is_superuser": False, "roles": ["developer"]}

    response = client.post(f"/admin/auth/user/{carol.pk}/change/", {
        "email": "carol@example.org", "is_active": "on", "is_staff": "on", "roles": ["developer", "sre"],
        "new_password": "another-long-1"})
    assert response.status_code == 302, response.content[:2000]
    [updated] = _records(action="user.update")
    assert updated.before == {**created.after}
    assert updated.after == {"username": "carol", "email": "carol@example.org", "is_active": True,
                             "is_staff": True, "is_superuser": False, "roles": ["developer", "sre"],
                             "password_changed": True}
    assert "another-long-1" not in str(updated.payload())
    carol.refresh_from_db()
    assert carol.is_staff and carol.check_password("another-long-1")
    assert sorted(carol.groups.values_list("name", flat=True)) == ["developer", "sre"]


def test_admin_user_form_errors_change_nothing(client, make_user):
    from django.contrib.auth.models import User

    client.force_login(make_user("root-1", "admin", superuser=True))
    response = client.post("/admin/auth/user/add/", {"username": "dave", "new_password": "short", "roles": []})
    assert response.status_code == 200
    assert "This password is too short" in response.content.decode()
    response = client.post("/admin/auth/user/add/", {"username": "root-1", "new_password": "long-enough-1"})
    assert response.status_code == 200
    assert "A user with that username already exists." in response.content.decode()
    assert not User.objects.filter(username="dave").exists()
    assert AuditRecord.objects.count() == 0


def test_only_a_superuser_makes_a_superuser_in_the_admin(client, make_user):
    from django.contrib.auth.models import User

    staff_admin = make_user("ops-admin", "admin")
    User.objects.filter(pk=staff_admin.pk).update(is_staff=True)
    target = make_user("erin", "developer")
    client.force_login(staff_admin)
    response = client.post(f"/admin/auth/user/{target.pk}/change/", {
        "email": "", "is_active": "on", "is_staff": "on", "is_superuser": "on", "roles": ["developer"]})
    assert response.status_code == 403
    target.refresh_from_db()
    assert (target.is_staff, target.is_superuser) == (False, False)
    assert AuditRecord.objects.count() == 0


@pytest.mark.parametrize("url", [
    "/admin/auth/group/", "/admin/auth/group/add/", "/admin/knox/authtoken/", "/admin/knox/authtoken/add/",
    "/admin/accounts/apitoken/", "/admin/axes/accessattempt/",
    "/admin/django_celery_beat/intervalschedule/add/", "/admin/django_celery_beat/crontabschedule/add/",
    "/admin/django_celery_beat/solarschedule/", "/admin/django_celery_beat/clockedschedule/",
])
def test_admin_pages_that_would_write_without_an_audit_record_are_gone(client, make_user, url):
    from django.contrib.auth.models import Group

    client.force_login(make_user("root-1", "admin", superuser=True))
    groups = Group.objects.count()
    assert client.get(url).status_code == 404
    assert client.post(url, {"name": "sneaky"}).status_code == 404
    assert Group.objects.count() == groups
    assert AuditRecord.objects.count() == 0


RECONCILE = "Reconcile every cluster with ZooKeeper"
SWEEP = "Back-check prepared transaction messages"


def test_admin_schedule_changes_are_audited_and_tasks_are_never_added_or_deleted(client, make_user):
    from django_celery_beat.models import PeriodicTask

    client.force_login(make_user("root-1", "admin", superuser=True))
    reconcile = PeriodicTask.objects.get(name=RECONCILE)
    sweep = PeriodicTask.objects.get(name=SWEEP)
    response = client.post(f"/admin/django_celery_beat/periodictask/{reconcile.pk}/change/",
                           {"enabled": "on", "every": "2", "period": "minutes"})
    assert response.status_code == 302, response.content[:2000]
    [rec] = _records(action="reconcile.schedule")
    assert (rec.actor_name, rec.source) == ("root-1", "web")
    assert (rec.before["every_seconds"], rec.after["every_seconds"]) == (60, 120)
    response = client.post(f"/admin/django_celery_beat/periodictask/{sweep.pk}/change/",
                           {"every": "30", "period": "seconds"})  # unticked: off
    assert response.status_code == 302, response.content[:2000]
    [rec] = _records(action="schedule.update")
    assert (rec.object_repr, rec.before, rec.after) == (
        SWEEP, {"interval": "every 5 seconds", "enabled": True}, {"interval": "every 30 seconds", "enabled": False})
    sweep.refresh_from_db()
    assert (sweep.interval.every, sweep.interval.period, sweep.enabled) == (30, "seconds", False)

    assert client.get("/admin/django_celery_beat/periodictask/add/").status_code == 403
    assert client.post(f"/admin/django_celery_beat/periodictask/{sweep.pk}/delete/", {"post": "yes"}).status_code == 403
    assert PeriodicTask.objects.filter(name=SWEEP).exists()


def test_admin_schedule_out_of_bounds_is_a_field_error_and_changes_nothing(client, make_user):
    from django_celery_beat.models import PeriodicTask

    client.force_login(make_user("root-1", "admin", superuser=True))
    reconcile = PeriodicTask.objects.get(name=RECONCILE)
    response = client.post(f"/admin/django_celery_beat/periodictask/{reconcile.pk}/change/",
                           {"enabled": "on", "every": "5", "period": "seconds"})
    assert response.status_code == 200
    assert "The reconcile runs every 10 seconds to once a day." in response.content.decode()
    reconcile.refresh_from_db()
    assert reconcile.interval.every == 60
    assert AuditRecord.objects.count() == 0


def test_a_staff_sre_edits_a_schedule_and_a_staff_developer_is_refused(client, make_user):
    from django.contrib.auth.models import User
    from django_celery_beat.models import PeriodicTask

    sre, dev = make_user("sre-1", "sre"), make_user("dev-1", "developer")
    User.objects.filter(pk__in=[sre.pk, dev.pk]).update(is_staff=True)
    sweep = PeriodicTask.objects.get(name=SWEEP)
    client.force_login(dev)
    url = f"/admin/django_celery_beat/periodictask/{sweep.pk}/change/"
    assert client.post(url, {"enabled": "on", "every": "1", "period": "minutes"}).status_code == 403
    assert AuditRecord.objects.count() == 0
    client.force_login(sre)
    assert client.post(url, {"enabled": "on", "every": "1", "period": "minutes"}).status_code == 302
    [rec] = _records(action="schedule.update")
    assert (rec.actor_name, rec.after) == ("sre-1", {"interval": "every minute", "enabled": True})


def test_token_issuance_is_audited_without_the_key(make_user, api_for):
    user = make_user("bot-1", "developer")
    first = api_for(None).post("/api/v1/auth/token/", {"username": "bot-1", "password": "pw-for-tests-1"})
    again = api_for(None).post("/api/v1/auth/token/", {"username": "bot-1", "password": "pw-for-tests-1"})
    assert first.status_code == again.status_code == 200
    assert first.json()["token"] != again.json()["token"]  # each login makes its own token, each expires
    assert first.json()["expiry"] and first.json()["owner"] == "bot-1"
    assert api_for(None).post("/api/v1/auth/token/", {"username": "bot-1", "password": "wrong"}).status_code == 400
    records = _records(action="token.create")
    assert [(r.actor_name, r.source, r.after["owner"], r.after["name"]) for r in records] == [
        ("bot-1", "api", "bot-1", "password login"), ("bot-1", "api", "bot-1", "password login")]
    assert first.json()["token"] not in str([r.payload() for r in records])
    assert user.auth_token_set.count() == 2


def test_admin_trace_index_schedule_goes_through_the_tracing_action(client, make_user):
    from django_celery_beat.models import PeriodicTask

    from apps.tracing import schedule

    schedule.write_schedule(10, True)  # the trace index's task as its migration or first use makes it
    task = PeriodicTask.objects.get(name=schedule.TASK_NAME)
    client.force_login(make_user("root-1", "admin", superuser=True))
    url = f"/admin/django_celery_beat/periodictask/{task.pk}/change/"
    response = client.post(url, {"enabled": "on", "every": "90", "period": "seconds"})
    assert response.status_code == 200
    assert "The trace index runs every 1 to 1440 whole minutes." in response.content.decode()
    assert client.post(url, {"enabled": "on", "every": "1", "period": "hours"}).status_code == 302
    [rec] = _records(action="trace_index.schedule")
    assert (rec.actor_name, rec.before, rec.after) == (
        "root-1", {"every_minutes": 10, "enabled": True}, {"every_minutes": 60, "enabled": True})
