"""Every policy rule of Switchyard, in one place.

A rule runs before any human sees an application (on submit, again on the final approval, and on
demand through the dry-run endpoints) and explains itself in words. `evaluate(application)` gives
a Report: each check passed or not, with the message and the form field it concerns, and the
approval slots the application needs.

Limits come from settings.SWITCHYARD_POLICY (a dict) over DEFAULT_LIMITS.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field

from django.conf import settings
from django.db.models import Sum

from apps.accounts.roles import ADMIN, has_role
from apps.bindings.choices import BindingStatus, DeliveryMode
from apps.bindings.models import Binding, ProducerGrant, selector_matches
from apps.clusters.choices import ClusterStatus, Environment, StorageLevel
from apps.governance.workflow import LIVE, Slot
from apps.topics.choices import TopicStatus
from apps.topics.models import Topic
from apps.transactions.timing import check_window_s

DEFAULT_LIMITS = {
    "topics_per_team": 50,
    "team_peak_mps_per_cluster": 50_000,
    "bindings_per_topic": 100,
}

# What each rule says, shown on the forms before anyone submits (rule id → title, explanation).
RULES: dict[str, tuple[str, str]] = {
    "team-member": ("Applicant belongs to the team",
                    "You apply for your own team: for a topic, the owning team; for a binding or grant, the "
                    "team that owns the app."),
    "naming": ("Topic naming",
               "A topic's name is the owning team's name, a dot, then lowercase words separated by '.' or "
               "'-' (e.g. payments.order-created); at most 120 characters."),
    "unique-name": ("Name is free", "No topic of that name exists or is requested in the same environment."),
    "cluster": ("Cluster fits", "The cluster belongs to the chosen environment and is active (not in maintenance "
                "or retired)."),
    "storage": ("Storage level", "A cluster that keeps messages in memory only cannot host a file-storage topic."),
    "transactional-durable": ("Transactions need durable storage",
                              "Transactional topics hold half messages until the producer commits or rolls "
                              "back; they must survive a broker restart, so they need file storage."),
    "tx-check": ("Back-checks end within retention",
                 "A transactional topic's back-checks (first after the delay, then after the interval, doubling up "
                 "to four times it, at most the maximum number of checks) must all happen while the topic still "
                 "keeps the message; the defaults are 6 s, 30 s and 15 checks."),
    "quota-topics": ("Topics per team", "A team owns at most {topics_per_team} topics (requested ones count)."),
    "quota-mps": ("Peak rate per team and cluster",
                  "The expected peak messages/s of one team's topics on one cluster add up to at most "
                  "{team_peak_mps_per_cluster}."),
    "app-active": ("App is active", "Only an active app can be bound or granted."),
    "topic-active": ("Topic is active", "Only an active topic can be subscribed or published to."),
    "unique-group": ("Group is free", "A consumer group is bound to a topic once (one binding per topic and group)."),
    "group-owner": ("Group belongs to the app", "A consumer group name belongs to the app that first used it."),
    "ordered-broadcast": ("No broadcast on ordered topics",
                          "Per-key order needs one consumer per message: an ordered topic is consumed in "
                          "clustering mode only."),
    "selector-matches": ("Selector matches the topic",
                         "The selector matches at least one of the topic's message types; otherwise the group "
                         "would never receive anything."),
    "ttl-retention": ("TTL within retention", "A message cannot wait for delivery longer than the topic keeps it."),
    "quota-bindings": ("Bindings per topic", "A topic has at most {bindings_per_topic} bindings."),
    "unique-grant": ("Not granted yet", "The app is not already granted, or asking, to publish on the topic."),
    "prod-approval": ("Production needs an SRE",
                      "An application for a production cluster needs an SRE's approval besides the owning "
                      "team's approver."),
}

TOPIC_RULES = ["team-member", "naming", "unique-name", "cluster", "storage", "transactional-durable",
               "tx-check", "quota-topics", "quota-mps", "prod-approval"]
BINDING_RULES = ["team-member", "app-active", "topic-active", "unique-group", "group-owner", "ordered-broadcast",
                 "selector-matches", "ttl-retention", "quota-bindings", "prod-approval"]
GRANT_RULES = ["team-member", "app-active", "topic-active", "unique-grant", "prod-approval"]
RULES_BY_KIND = {"topic": TOPIC_RULES, "binding": BINDING_RULES, "grant": GRANT_RULES}

NAME_RE = r"[a-z][a-z0-9-]*(\.[a-z][a-z0-9-]*)*"


def limits() -> dict:
    return {**DEFAULT_LIMITS, **getattr(settings, "SWITCHYARD_POLICY", {})}


def describe(kind: str) -> list[dict]:
    """The rules an application kind goes through, in words (for forms and the API)."""
    lim = limits()
    return [{"rule": r, "title": RULES[r][0], "explanation": RULES[r][1].format(**lim)} for r in RULES_BY_KIND[kind]]


@dataclass
class Check:
    rule: str
    passed: bool
    message: str
    field: str | None = None
    title: str = ""

    def __post_init__(self):
        self.title = self.title or RULES[self.rule][0]


@dataclass
class Report:
    kind: str
    checks: list[Check] = field(default_factory=list)
    required_approvals: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    @property
    def failures(self) -> list[Check]:
        return [c for c in self.checks if not c.passed]

    def errors(self) -> dict[str, list[str]]:
        """Failed checks as Django ValidationError's dict: field → messages ('__all__' for the form)."""
        out: dict[str, list[str]] = {}
        for c in self.failures:
            out.setdefault(c.field or "__all__", []).append(c.message)
        return out

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "passed": self.passed,
            "checks": [asdict(c) for c in self.checks],
            "required_approvals": [{"slot": s, "label": Slot(s).label} for s in self.required_approvals],
        }


def evaluate(application, *, applicant=None) -> Report:
    """Run every rule of the application's kind. The application may be unsaved (dry run)."""
    applicant = applicant or application.applicant
    return EVALUATORS[policy_key(application)](application, applicant)


def policy_key(application) -> str:
    """Which rule set an application goes through: its kind, or a finer key a kind gives (topic-change)."""
    return getattr(application, "policy_key", None) or application.kind


def register(key: str, evaluator, rules: list[str], texts: dict[str, tuple[str, str]]) -> None:
    """An application kind defined in another app adds its rule set (its AppConfig.ready calls this)."""
    for rule, text in texts.items():
        RULES.setdefault(rule, text)
    RULES_BY_KIND[key] = rules
    EVALUATORS[key] = evaluator


def slots_for(cluster) -> list[str]:
    return [Slot.OWNER, Slot.SRE] if cluster.environment == Environment.PROD else [Slot.OWNER]


def prod_check(cluster) -> Check:
    if cluster.environment == Environment.PROD:
        return Check("prod-approval", True, f"{cluster.name} is a production cluster: an SRE approves besides "
                                            "the owning team's approver.")
    return Check("prod-approval", True, f"{cluster.name} is not production: the owning team's approver decides.")


def is_member(user, team) -> bool:
    return has_role(user, ADMIN) or team.members.filter(pk=user.pk).exists()


def team_check(applicant, team, field_name: str, what: str) -> Check:
    if is_member(applicant, team):
        return Check("team-member", True, f"You are a member of team {team.name}.", field_name)
    return Check("team-member", False, f"You are not a member of team {team.name}, which owns {what}; "
                                       "ask one of its members to apply.", field_name)


def _others(application):
    """Live applications of the same kind, this one excepted."""
    qs = type(application).objects.filter(state__in=LIVE)
    return qs.exclude(pk=application.pk) if application.pk else qs


# --- topics -------------------------------------------------------------------------------


def retired_name_message(topic) -> str:
    """Why a retired topic's name cannot be taken yet, and when it frees up."""
    draining = Binding.objects.filter(topic=topic, status=BindingStatus.ACTIVE).count()
    when = f"{topic.data_deleted_after:%Y-%m-%d %H:%M} UTC"
    wait = (f"after its {draining} binding{'s' if draining != 1 else ''} drain and not before {when}" if draining
            else f"at {when}")
    return (f"Topic {topic.name} was retired on {topic.retired_at:%Y-%m-%d %H:%M} UTC; its name is free again once "
            f"its data is deleted ({topic.retention_hours} hours of retention after retirement): {wait}. Choose "
            "another name or wait until then.")


def _topic(app, applicant) -> Report:
    lim = limits()
    team, cluster = app.team, app.cluster
    checks = [team_check(applicant, team, "team", "the topic")]

    pattern = rf"^{re.escape(team.name)}\.{NAME_RE}$"
    if re.match(pattern, app.name or "") and len(app.name) <= 120:
        checks.append(Check("naming", True, f"{app.name} follows the naming rule.", "name"))
    else:
        checks.append(Check("naming", False, f"Topic names start with the owning team's name and a dot, then "
                                             f"lowercase words separated by '.' or '-', e.g. "
                                             f"{team.name}.order-created.", "name"))

    taken = Topic.objects.filter(name=app.name, environment=app.environment).exclude(
        status=TopicStatus.DELETED).first()
    asked = _others(app).filter(name=app.name, environment=app.environment, topic__isnull=True).first()
    if taken and taken.status == TopicStatus.RETIRED:
        checks.append(Check("unique-name", False, retired_name_message(taken), "name"))
    elif taken:
        checks.append(Check("unique-name", False, f"A topic named {app.name} already exists in "
                                                  f"{app.get_environment_display()}.", "name"))
    elif asked:
        checks.append(Check("unique-name", False, f"Application {asked.reference} already asks for {app.name} in "
                                                  f"{app.get_environment_display()}.", "name"))
    else:
        checks.append(Check("unique-name", True, f"{app.name} is free in {app.get_environment_display()}.", "name"))

    if cluster.environment != app.environment:
        checks.append(Check("cluster", False, f"Cluster {cluster.name} serves {cluster.get_environment_display()}, "
                                              f"not {app.get_environment_display()}.", "cluster"))
    elif cluster.status != ClusterStatus.ACTIVE:
        status = "in maintenance" if cluster.status == ClusterStatus.MAINTENANCE else cluster.get_status_display().lower()
        checks.append(Check("cluster", False, f"Cluster {cluster.name} is {status}; choose an active cluster.",
                            "cluster"))
    else:
        checks.append(Check("cluster", True, f"Cluster {cluster.name} serves {cluster.get_environment_display()} "
                                             "and is active.", "cluster"))

    if cluster.storage_level == StorageLevel.MEMORY and app.storage_level == StorageLevel.FILE:
        checks.append(Check("storage", False, f"Cluster {cluster.name} keeps messages in memory only; choose memory "
                                              "storage or a file-storage cluster.", "storage_level"))
    else:
        checks.append(Check("storage", True, "The cluster offers this storage level.", "storage_level"))

    if app.transactional and app.storage_level != StorageLevel.FILE:
        checks.append(Check("transactional-durable", False, "A transactional topic needs file storage: half "
                                                            "messages must survive a broker restart.",
                            "transactional"))
    else:
        checks.append(Check("transactional-durable", True, "No transactional topic on memory storage.",
                            "transactional"))

    checks.append(tx_check(app))

    owned = Topic.objects.filter(team=team).count() + _others(app).filter(team=team, topic__isnull=True).count()
    if owned + 1 > lim["topics_per_team"]:
        checks.append(Check("quota-topics", False, f"Team {team.name} already has {owned} topics (requested ones "
                                                   f"included); the limit is {lim['topics_per_team']}."))
    else:
        checks.append(Check("quota-topics", True, f"Team {team.name} would have {owned + 1} of "
                                                  f"{lim['topics_per_team']} topics."))

    used = (Topic.objects.filter(team=team, cluster=cluster).aggregate(s=Sum("expected_peak_mps"))["s"] or 0) + \
        (_others(app).filter(team=team, cluster=cluster, topic__isnull=True)
         .aggregate(s=Sum("expected_peak_mps"))["s"] or 0)
    total = used + (app.expected_peak_mps or 0)
    if total > lim["team_peak_mps_per_cluster"]:
        checks.append(Check("quota-mps", False, f"Team {team.name} would expect {total:,} messages/s at peak on "
                                                f"{cluster.name} ({used:,} already); the limit is "
                                                f"{lim['team_peak_mps_per_cluster']:,}.", "expected_peak_mps"))
    else:
        checks.append(Check("quota-mps", True, f"Team {team.name} would expect {total:,} of "
                                               f"{lim['team_peak_mps_per_cluster']:,} messages/s on {cluster.name}.",
                            "expected_peak_mps"))

    checks.append(prod_check(cluster))
    return Report("topic", checks, slots_for(cluster))


def tx_check(app) -> Check:
    if not app.transactional:
        return Check("tx-check", True, "Not transactional: no back-checks.", "tx_check_max")
    values = (app.tx_check_delay_s, app.tx_check_interval_s, app.tx_check_max)
    if any(v is None or v < 1 for v in values):
        return Check("tx-check", False, "Give the first back-check delay, the interval and the maximum number of "
                                        "checks as whole numbers of at least 1.", "tx_check_delay_s")
    window = check_window_s(*values)
    retention = (app.retention_hours or 0) * 3600
    if window >= retention:
        return Check("tx-check", False, f"The back-checks would run for {window:,} s after a message is prepared, "
                                        f"longer than the topic keeps it ({retention:,} s); use fewer checks, a "
                                        "shorter interval or a longer retention.", "tx_check_max")
    return Check("tx-check", True, f"The last back-check would come {window:,} s after prepare, within the "
                                   f"retention of {retention:,} s.", "tx_check_max")


# --- bindings -----------------------------------------------------------------------------


def topic_active(topic) -> Check:
    if topic.status == TopicStatus.ACTIVE:
        return Check("topic-active", True, f"Topic {topic.name} is active.", "topic")
    return Check("topic-active", False, f"Topic {topic.name} is {topic.get_status_display().lower()}.", "topic")


def app_active(app) -> Check:
    if app.active:
        return Check("app-active", True, f"App {app.app_id} is active.", "app")
    return Check("app-active", False, f"App {app.app_id} is deactivated.", "app")


def subscription_checks(topic, sub) -> list[Check]:
    """What a subscription's settings (a binding application's, or a binding's as a change would leave them)
    must satisfy on its topic: delivery mode, selector, TTL."""
    checks = []
    if topic.ordered and sub.mode == DeliveryMode.BROADCAST:
        checks.append(Check("ordered-broadcast", False, f"Topic {topic.name} is ordered: consume it in clustering "
                                                        "mode.", "mode"))
    else:
        checks.append(Check("ordered-broadcast", True, "The delivery mode suits the topic.", "mode"))

    matched = [t for t in topic.message_types if selector_matches(sub.selector_kind, sub.selector_pattern, t)]
    if matched:
        checks.append(Check("selector-matches", True, f"The selector receives {', '.join(matched)}.",
                            "selector_pattern"))
    else:
        checks.append(Check("selector-matches", False, f"The selector matches none of {topic.name}'s message types "
                                                       f"({', '.join(topic.message_types)}).", "selector_pattern"))

    if sub.ttl_s > topic.retention_s:
        checks.append(Check("ttl-retention", False, f"The TTL ({sub.ttl_s}s) is longer than {topic.name} keeps "
                                                    f"messages ({topic.retention_s}s).", "ttl_s"))
    else:
        checks.append(Check("ttl-retention", True, "The TTL fits within the topic's retention.", "ttl_s"))
    return checks


def _binding(ba, applicant) -> Report:
    lim = limits()
    topic, app = ba.topic, ba.app
    checks = [team_check(applicant, app.team, "app", f"app {app.app_id}"), app_active(app), topic_active(topic)]

    existing = Binding.objects.filter(topic=topic, group=ba.group, status=BindingStatus.ACTIVE).first()
    asked = _others(ba).filter(topic=topic, group=ba.group, binding__isnull=True).first()
    if existing:
        checks.append(Check("unique-group", False, f"Group {ba.group} is already bound to {topic.name}.", "group"))
    elif asked:
        checks.append(Check("unique-group", False, f"Application {asked.reference} already asks to bind group {ba.group} "
                                                   f"to {topic.name}.", "group"))
    else:
        checks.append(Check("unique-group", True, f"Group {ba.group} is not bound to {topic.name} yet.", "group"))

    other_app = Binding.objects.filter(group=ba.group).exclude(app=app).select_related("app").first()
    if other_app:
        checks.append(Check("group-owner", False, f"Group {ba.group} belongs to app {other_app.app.app_id}; "
                                                  "choose another group name.", "group"))
    else:
        checks.append(Check("group-owner", True, f"Group {ba.group} is used by app {app.app_id} only.", "group"))

    checks += subscription_checks(topic, ba)

    count = Binding.objects.filter(topic=topic, status=BindingStatus.ACTIVE).count() + \
        _others(ba).filter(topic=topic, binding__isnull=True).count()
    if count + 1 > lim["bindings_per_topic"]:
        checks.append(Check("quota-bindings", False, f"{topic.name} has {count} bindings (requested ones included); "
                                                     f"the limit is {lim['bindings_per_topic']}.", "topic"))
    else:
        checks.append(Check("quota-bindings", True, f"{topic.name} would have {count + 1} of "
                                                    f"{lim['bindings_per_topic']} bindings.", "topic"))
    checks.append(prod_check(topic.cluster))
    return Report("binding", checks, slots_for(topic.cluster))


# --- producer grants ------------------------------------------------------------------------


def _grant(ga, applicant) -> Report:
    topic, app = ga.topic, ga.app
    checks = [team_check(applicant, app.team, "app", f"app {app.app_id}"), app_active(app), topic_active(topic)]
    if ProducerGrant.objects.filter(topic=topic, app=app, status=BindingStatus.ACTIVE).exists():
        checks.append(Check("unique-grant", False, f"App {app.app_id} may already publish on {topic.name}.", "app"))
    elif asked := _others(ga).filter(topic=topic, app=app, grant__isnull=True).first():
        checks.append(Check("unique-grant", False, f"Application {asked.reference} already asks for this grant.", "app"))
    else:
        checks.append(Check("unique-grant", True, f"App {app.app_id} is not granted {topic.name} yet.", "app"))
    checks.append(prod_check(topic.cluster))
    return Report("grant", checks, slots_for(topic.cluster))


EVALUATORS = {"topic": _topic, "binding": _binding, "grant": _grant}
