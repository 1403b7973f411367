"""The web side of lifecycle applications (Django's test client, no worker): forms pre-filled with the current
values, field errors that change nothing, drafts, the diff on the application page and in the inbox, who gets
which button, and the SRE's drop-backlog page."""

import pytest

from apps.audit.models import AuditRecord
from apps.lifecycle.models import LifecycleApplication
from apps.topics.models import Topic

pytestmark = pytest.mark.django_db

CHANGE = {"message_types": "created, paid, refunded", "retention_hours": "96", "max_message_bytes": "8192",
          "tx_check_delay_s": "6", "tx_check_interval_s": "30", "tx_check_max": "15",
          "description": "Orders that were paid", "team": "payments", "reason": "Refunds arrive"}


def page(client, user, url, data=None):
    client.force_login(user)
    response = client.post(url, data) if data is not None else client.get(url)
    return response, response.content.decode()


def test_the_change_form_is_prefilled_and_refuses_bad_values(client, people, estate):
    e = estate()
    response, html = page(client, people.dev, f"/topics/{e.topic.pk}/change/")
    assert response.status_code == 200
    assert 'value="created, paid"' in html and 'name="retention_hours" value="48"' in html
    assert "Removed message types are not needed" in html  # the rules, before anyone submits
    response, html = page(client, people.dev, f"/topics/{e.topic.pk}/change/", {**CHANGE, "retention_hours": "0"})
    assert response.status_code == 400 and 'data-testid="error-retention_hours"' in html
    response, html = page(client, people.dev, f"/topics/{e.topic.pk}/change/", {**CHANGE, "message_types": "created"})
    assert response.status_code == 400 and "Message type paid cannot be removed" in html
    assert 'data-testid="error-message_types"' in html
    assert LifecycleApplication.objects.count() == 0 and Topic.objects.get().retention_hours == 48


def test_a_submitted_change_shows_its_diff_to_the_approver(client, people, estate):
    e = estate()
    response, _ = page(client, people.dev, f"/topics/{e.topic.pk}/change/", CHANGE)
    application = LifecycleApplication.objects.get()
    assert response.status_code == 302 and response.url == f"/applications/lifecycle/{application.pk}/"
    client.logout()
    _, queue = page(client, people.lead, "/approvals/")
    assert f"{application.reference}</a>" in queue and "topic change" in queue
    assert "message_types +refunded; retention_hours 48 → 96" in queue
    _, detail = page(client, people.lead, f"/applications/lifecycle/{application.pk}/")
    assert f'data-testid="reference">{application.reference}<' in detail
    assert '<td class="before">48</td><td>→</td><td class="after">96</td>' in detail
    assert 'data-testid="approve"' in detail
    response, _ = page(client, people.lead, f"/applications/lifecycle/{application.pk}/approve/", {"comment": "ok"})
    assert response.status_code == 302
    assert Topic.objects.get().message_types == ["created", "paid", "refunded"]


def test_drafts_keep_the_change_and_are_edited_prefilled(client, people, estate):
    e = estate()
    page(client, people.consumer, f"/bindings/{e.binding.pk}/change/",
         {"selector_kind": "exact", "selector_pattern": "paid", "mode": "clustering", "delivery_limit": "5",
          "ttl_s": "3600", "backoff_initial_ms": "500", "backoff_max_ms": "30000", "backoff_multiplier": "2.0",
          "max_in_flight": "64", "description": "", "reason": "more parallel", "intent": "draft"})
    draft = LifecycleApplication.objects.get()
    assert (draft.state, draft.changes) == ("draft", {"max_in_flight": 64})
    response, html = page(client, people.consumer, f"/applications/lifecycle/{draft.pk}/edit/")
    assert response.status_code == 200 and 'name="max_in_flight" value="64"' in html
    assert page(client, people.dev, f"/applications/lifecycle/{draft.pk}/edit/")[0].status_code == 403


def test_buttons_follow_the_role_and_the_state(client, people, estate):
    e = estate()
    _, html = page(client, people.dev, f"/topics/{e.topic.pk}/")
    assert all(f'data-testid="{t}"' in html for t in ("change-topic", "retire-topic", "revoke-checkout"))
    client.logout()
    _, html = page(client, people.auditor, f"/topics/{e.topic.pk}/")
    assert 'data-testid="change-topic"' not in html
    assert page(client, people.auditor, f"/topics/{e.topic.pk}/change/")[0].status_code == 403
    client.logout()
    _, html = page(client, people.consumer, f"/topics/{e.topic.pk}/")  # a developer of another team
    assert not any(f'data-testid="{t}"' in html for t in ("change-topic", "retire-topic", "revoke-checkout"))
    assert 'Request publish grant' in html  # what another team may ask of this topic is still offered
    client.logout()
    _, html = page(client, people.consumer, f"/apps/{e.consumer.app_id}/")
    assert 'data-testid="deactivate-app"' in html
    response, html = page(client, people.consumer, f"/apps/{e.consumer.app_id}/deactivate/",
                          {"reason": "compromised host"})
    application = LifecycleApplication.objects.get()
    assert response.status_code == 302 and (application.operation, application.team.name) == ("deactivate",
                                                                                             "logistics")


def test_dropping_a_backlog_is_for_sres_and_needs_the_backlog_read(client, people, api_for, estate):
    e = estate()
    retire = api_for(people.dev).post("/api/v1/lifecycle-applications/", {
        "operation": "retire", "topic": e.topic.pk, "reason": "replaced"}, format="json").json()
    api_for(people.lead).post(f"/api/v1/lifecycle-applications/{retire['id']}/approve/", format="json")
    url = f"/bindings/{e.binding.pk}/drop-backlog/"
    assert page(client, people.dev, url)[0].status_code == 403
    client.logout()
    _, topic_page = page(client, people.sre, f"/topics/{e.topic.pk}/")
    assert 'data-testid="drop-shipping"' in topic_page and 'data-testid="retired-note"' in topic_page
    response, html = page(client, people.sre, url)
    assert response.status_code == 200 and 'data-testid="backlog-unknown"' in html  # no broker runs here
    assert "no broker registered in ZooKeeper" in html
    before = AuditRecord.objects.count()
    response, html = page(client, people.sre, url, {"confirm_backlog": "0"})
    assert response.status_code == 400 and "could not be read" in html
    assert AuditRecord.objects.count() == before
