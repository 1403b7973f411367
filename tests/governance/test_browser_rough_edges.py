"""Real browser (Chromium): the rough edges people hit on the application and approval pages.

- the wording follows who reads: the applicant reads "Your application" and the policy said to them; an approver
  reads "<applicant>'s application", the policy said of the applicant, and gets the approve/reject controls;
- a form with field errors shows the policy's failures too, in the same round;
- rejecting without a comment is an error on the comment box (not a banner), and nothing changes;
- banners carry their level (an error looks like one); what cannot be undone (withdraw, reject) asks first;
- an approver whose slot a colleague filled meanwhile is told so on the page (not a "not allowed" page), and a
  partial approval says who is still needed.
"""

import pytest

from apps.audit.models import AuditRecord
from apps.governance.workflow import State
from apps.topics.models import TopicApplication
from tests.governance.test_browser import fill_topic_form, log_out
from tests.support.browser import login

pytestmark = pytest.mark.django_db(transaction=True)

ERROR_RED = "rgb(251, 227, 227)"  # .messages li.error's background (switchyard.css)


def pending_topic(people, topic_fields, cluster, **overrides):
    from apps.topics.actions import create_topic_application

    return create_topic_application(actor=people.dev, **topic_fields(cluster, **overrides))


def whose(page) -> str:
    return page.locator("[data-testid=whose]").inner_text()


def test_the_wording_follows_who_reads_the_application(live_server, page, people, make_cluster, topic_fields):
    application = pending_topic(people, topic_fields, make_cluster("dev-a", "dev"))
    url = f"{live_server.url}/applications/topics/{application.pk}/"

    login(page, live_server.url, "dev-pay")
    page.goto(url)
    assert whose(page) == "Your application: it waits for an approver of team payments."
    assert page.locator("[data-testid=check-team-member]").inner_text() == (
        "✓ Applicant belongs to the team: You are a member of team payments.")
    assert page.locator("[data-testid=approve]").count() == 0 and page.locator("[data-testid=withdraw]").count() == 1
    log_out(page, live_server)

    login(page, live_server.url, "lead-pay")
    page.goto(url)
    assert whose(page) == "dev-pay's application: it waits for your decision as the owning team's approver."
    assert page.locator("[data-testid=check-team-member]").inner_text() == (
        "✓ Applicant belongs to the team: dev-pay is a member of team payments.")
    assert "You are" not in page.locator("[data-testid=policy-report]").inner_text()
    assert "your application" not in page.locator("main").inner_text().lower()
    assert page.locator("[data-testid=approve]").is_visible() and page.locator("[data-testid=reject]").is_visible()
    assert page.locator("label[for=id_comment]").inner_text() == "Comment to dev-pay"
    assert page.locator("[data-testid=withdraw]").count() == 0
    log_out(page, live_server)

    login(page, live_server.url, "audit-1")
    page.goto(url)
    assert whose(page) == "dev-pay's application: it waits for an approver of team payments."
    assert page.locator("[data-testid=why-not]").count() == 0  # said once, above
    assert page.locator("[data-testid=approve]").count() == 0 and page.locator("[data-testid=reject]").count() == 0


def test_field_errors_and_policy_failures_arrive_in_one_round(live_server, page, people, make_cluster):
    make_cluster("dev-a", "dev")
    login(page, live_server.url, "dev-pay")
    page.click("[data-testid=nav-new-topic]")
    fill_topic_form(page, "payments order paid")  # a field error: not a topic name at all
    page.select_option("#id_environment", "prod")  # a policy failure: dev-a serves Development
    page.fill("#id_message_types", "")  # another field error
    page.click("[data-testid=submit]")

    assert "Use 2–120 letters" in page.locator("[data-testid=error-name]").inner_text()
    assert "required" in page.locator("[data-testid=error-message_types]").inner_text()
    assert page.locator("[data-testid=error-cluster]").inner_text() == (
        "Cluster dev-a serves Development, not Production.")
    # the naming rule waits for a name it can read: no second message about the same field
    assert page.locator("[data-testid=error-name] li").count() == 1
    assert TopicApplication.objects.count() == 0

    page.fill("#id_name", "payments.order-paid")
    page.fill("#id_message_types", "created, paid")
    page.select_option("#id_environment", "dev")
    page.click("[data-testid=submit]")  # everything was said at once: fixing it is enough
    page.wait_for_url("**/applications/topics/*/")
    assert page.locator("[data-testid=state]").inner_text() == "pending"
    assert page.locator("[data-testid=message-success]").inner_text() == "Submitted for approval."


def test_rejecting_without_a_comment_is_an_error_on_the_comment_and_changes_nothing(live_server, page, people,
                                                                                   make_cluster, topic_fields):
    application = pending_topic(people, topic_fields, make_cluster("dev-a", "dev"))
    login(page, live_server.url, "lead-pay")
    page.goto(f"{live_server.url}/applications/topics/{application.pk}/")
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.accept()))

    with page.expect_navigation() as answer:
        page.click("[data-testid=reject]")
    assert answer.value.status == 400
    assert page.locator("[data-testid=error-comment]").inner_text() == (
        "Say why you reject it; the applicant reads this.")
    assert page.locator("[data-testid=error-comment]").get_attribute("role") == "alert"
    assert page.locator(".messages li").count() == 0  # no banner, let alone an info one
    assert dialogs == []  # nothing to confirm before the page has said what is missing
    assert page.locator("[data-testid=state]").inner_text() == "pending"
    application.refresh_from_db()
    assert application.state == State.PENDING and application.decisions.count() == 0
    assert not AuditRecord.objects.filter(action="topic_application.reject").exists()

    page.fill("#id_comment", "Use the existing payments.order topic")
    page.click("[data-testid=reject]")
    page.wait_for_url(f"**/applications/topics/{application.pk}/")
    assert dialogs == [f"Reject dev-pay's application {application.reference}? A rejection is final."]
    assert page.locator("[data-testid=state]").inner_text() == "rejected"
    assert page.locator("[data-testid=message-success]").inner_text() == "Rejected: dev-pay reads your comment."


def test_withdrawing_asks_first(live_server, page, people, make_cluster, topic_fields):
    application = pending_topic(people, topic_fields, make_cluster("dev-a", "dev"))
    login(page, live_server.url, "dev-pay")
    page.goto(f"{live_server.url}/applications/topics/{application.pk}/")
    answers = ["dismiss", "accept"]
    page.on("dialog", lambda d: getattr(d, answers.pop(0))())

    page.click("[data-testid=withdraw]")  # dismissed: nothing sent
    assert answers == ["accept"]
    page.reload()
    assert page.locator("[data-testid=state]").inner_text() == "pending"
    assert TopicApplication.objects.get().state == State.PENDING

    page.click("[data-testid=withdraw]")
    page.wait_for_url(f"**/applications/topics/{application.pk}/")
    assert answers == []
    assert page.locator("[data-testid=state]").inner_text() == "withdrawn"
    assert page.locator("[data-testid=message-success]").inner_text() == f"{application.reference} is withdrawn."


def test_an_approver_beaten_to_the_slot_is_told_so_on_the_page(live_server, page, people, make_user, make_cluster,
                                                               topic_fields):
    from apps.topics.actions import approve_topic_application

    prod = make_cluster("prod-a", "prod")
    first = pending_topic(people, topic_fields, prod)
    second = pending_topic(people, topic_fields, prod, name="payments.order-refunded")
    colleague = make_user("lead-pay-2", "approver", team="payments")

    login(page, live_server.url, "lead-pay")
    # a partial approval says who is still needed, as a success
    page.goto(f"{live_server.url}/applications/topics/{second.pk}/")
    page.click("[data-testid=approve]")
    page.wait_for_url(f"**/applications/topics/{second.pk}/")
    assert page.locator("[data-testid=message-success]").inner_text() == (
        f"Your approval is recorded; {second.reference} now waits for an SRE.")
    assert page.locator("[data-testid=state]").inner_text() == "pending"

    page.goto(f"{live_server.url}/applications/topics/{first.pk}/")
    assert page.locator("[data-testid=approve]").is_visible()
    approve_topic_application(actor=colleague, application=first, comment="fine")  # meanwhile, a colleague
    page.click("[data-testid=approve]")
    page.wait_for_url(f"**/applications/topics/{first.pk}/")  # the application's page, not a refusal page
    error = page.locator("[data-testid=message-error]")
    assert error.inner_text() == ("lead-pay-2 has already approved as the owning team's approver; this application is "
                                  "waiting for an SRE.")
    assert error.get_attribute("role") == "alert"
    assert error.evaluate("e => getComputedStyle(e).backgroundColor") == ERROR_RED
    assert [d.actor.username for d in first.decisions.all()] == ["lead-pay-2"]
    assert whose(page) == "dev-pay's application: it waits for an SRE."


def test_the_topic_page_names_its_application_by_its_reference(live_server, page, people, make_cluster,
                                                              approved_topic):
    topic = approved_topic(make_cluster("dev-a", "dev"))
    login(page, live_server.url, "dev-pay")
    page.goto(f"{live_server.url}/topics/{topic.pk}/")
    link = page.locator("[data-testid=application-link]")
    assert link.inner_text() == topic.application.reference  # "T-<number>", as everywhere else, not a row id
    link.click()
    page.wait_for_url(f"**/applications/topics/{topic.application.pk}/")
    assert page.locator("[data-testid=reference]").inner_text() == topic.application.reference


def test_a_draft_refused_on_submit_says_what_to_do(live_server, page, people, make_cluster, topic_fields):
    from apps.topics.actions import create_topic_application

    draft = create_topic_application(actor=people.dev, submit=False,
                                     **topic_fields(make_cluster("dev-a", "dev"), environment="prod"))
    login(page, live_server.url, "dev-pay")
    page.goto(f"{live_server.url}/applications/topics/{draft.pk}/")
    page.click("[data-testid=submit]")
    page.wait_for_url(f"**/applications/topics/{draft.pk}/")
    assert page.locator("[data-testid=message-error]").inner_text() == (
        "Cluster dev-a serves Development, not Production. Edit the draft to fix this, then submit it.")
    assert page.locator("[data-testid=state]").inner_text() == "draft"
    page.click("text=Edit draft")  # and the form says it where it belongs, before anything is sent
    page.click("[data-testid=submit]")
    assert page.locator("[data-testid=error-cluster]").inner_text() == (
        "Cluster dev-a serves Development, not Production.")
