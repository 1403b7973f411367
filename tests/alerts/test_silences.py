"""Silences through Alertmanager's API as audited actions: SREs create and expire them, others are refused, bad
input gets field errors and reaches Alertmanager not at all."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


def test_silences_are_created_and_expired_by_sres_only_and_audited(people, api_for, monitoring, alert_settings):
    from apps.alerts import alertmanager
    from apps.audit.models import AuditRecord

    url = "/api/v1/monitoring/silences/"
    body = {"matchers": {"rule_id": "4242"}, "hours": 2, "comment": "maintenance of the billing consumers"}
    assert api_for(people.dev).post(url, body, format="json").status_code == 403
    assert api_for(people.auditor).post(url, body, format="json").status_code == 403
    bad = api_for(people.sre).post(url, {"matchers": {"rule id": ""}, "hours": 0, "comment": " "}, format="json")
    assert bad.status_code == 400 and set(bad.json()) == {"matchers", "hours", "comment"}, bad.content
    assert alertmanager.silences() == []

    made = api_for(people.sre).post(url, body, format="json")
    assert made.status_code == 201, made.content
    silence = made.json()
    assert (silence["matchers"], silence["state"], silence["created_by"], silence["comment"]) == (
        {"rule_id": "4242"}, "active", people.sre.username, "maintenance of the billing consumers")
    assert [s["id"] for s in api_for(people.auditor).get(url).json()] == [silence["id"]]
    assert api_for(people.dev).post(f"{url}{silence['id']}/expire/").status_code == 403

    assert api_for(people.sre).post(f"{url}{silence['id']}/expire/").status_code == 204
    assert [s["status"]["state"] for s in alertmanager.silences()] == ["expired"]
    assert list(AuditRecord.objects.filter(object_type="alertmanager.silence").order_by("id")
                .values_list("action", "object_id", "actor_name")) == [
        ("alert_silence.create", silence["id"], people.sre.username),
        ("alert_silence.expire", silence["id"], people.sre.username)]
