"""No implicit bypass: an action called without an actor raises; a system actor may do what its permission set
allows and nothing more, and the audit log names it."""

import pytest
from django.core.exceptions import PermissionDenied
from django.db import transaction

from apps.audit.models import AuditRecord
from control_plane import actors
from control_plane.errors import MissingActor, require_perm

pytestmark = pytest.mark.django_db


def test_require_perm_with_no_actor_is_a_programming_error():
    with pytest.raises(MissingActor, match="actor=None"):
        require_perm(None, "clusters.add_cluster")


def test_actions_called_with_none_raise_and_change_nothing():
    from apps.audit.recorder import record
    from apps.clusters import actions as clusters
    from apps.provisioning import actions as provisioning

    with pytest.raises(MissingActor):
        clusters.create_cluster(actor=None, name="c-none", environment="dev", region="r", zk_connect="127.0.0.1:1",
                                zk_chroot="/switchyard/c-none")
    with pytest.raises(MissingActor):
        provisioning.set_reconcile_schedule(actor=None, every_seconds=60, enabled=True)
    with pytest.raises(MissingActor), transaction.atomic():
        record(actor=None, action="nothing", object_type="x", object_id="1")
    assert AuditRecord.objects.count() == 0


def test_a_system_actor_may_do_what_its_permissions_allow_and_its_records_name_it():
    from apps.provisioning import actions as provisioning

    provisioning.set_reconcile_schedule(actor=actors.RECONCILE, every_seconds=120, enabled=True)
    record = AuditRecord.objects.get(action="reconcile.schedule")
    assert (record.actor_name, record.actor_id) == ("system:reconcile", None)


def test_a_system_actor_is_refused_what_its_permissions_do_not_allow():
    from apps.clusters import actions as clusters
    from apps.provisioning import actions as provisioning

    with pytest.raises(PermissionDenied, match="system:tx-backcheck may not"):
        provisioning.set_reconcile_schedule(actor=actors.TX_BACKCHECK, every_seconds=120, enabled=True)
    with pytest.raises(PermissionDenied, match="system:reconcile may not"):
        clusters.create_cluster(actor=actors.RECONCILE, name="c-sys", environment="dev", region="r",
                                zk_connect="127.0.0.1:1", zk_chroot="/switchyard/c-sys")
    assert AuditRecord.objects.count() == 0


def test_system_actors_hold_no_roles_and_belong_to_no_team():
    from apps.accounts.roles import roles_of
    from apps.governance.actions import require_member

    assert roles_of(actors.RECONCILE) == set()
    assert not actors.PROVISIONING.has_perm("clusters.view_cluster")
    with pytest.raises(ValueError):
        actors.SystemActor("reconcile")  # names start with system:
    from apps.accounts.models import Team

    team = Team.objects.create(name="payments", display_name="Payments")
    with pytest.raises(Exception) as refused:
        require_member(actors.RECONCILE, team)
    assert "not a member" in str(refused.value)
    with pytest.raises(MissingActor):
        require_member(None, team)
