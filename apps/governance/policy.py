"""Every policy rule of Switchyard, in one place.

A rule runs before any human sees an application (on submit, again on the final approval, and on
demand through the dry-run endpoints) and explains itself in words. `evaluate(application)` gives
a Report: each check passed or not, with the message and the form field it concerns, and the
approval slots the application needs.

A form with field errors still gets every policy check its valid fields allow (`evaluate(...,
unknown=fields)`): each rule is one step, and a step that reads a field the form could not take is skipped,
so an applicant sees field errors and policy failures in one round.

Messages name the applicant in the third person (approvers and auditors read them); a check about the
applicant also says it to them (`to_applicant`), which the applicant's own pages and forms show.

Limits come from settings.SWITCHYARD_POLICY (a dict) over DEFAULT_LIMITS.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from django.conf import settings
from django.db.models import Sum

from apps.accounts.roles import ADMIN, has_role
from apps.bindings.choices import BindingStatus, DeliveryMode, OnFailure
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
                              "back; they must survive a broker restart, so they need file storage (on a "
                              "replicated topic they are replicated like any message)."),
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
    "on-failure-ordered": ("Dead-lettering is for ordered topics",
                           "On failure: dead-letter says what a failing message does to its order key, so it is "
                           "given on ordered topics only; elsewhere a message goes to the dead-letter queue at the "
                           "delivery limit anyway (leave block, the default)."),
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
                 "on-failure-ordered", "selector-matches", "ttl-retention", "quota-bindings", "prod-approval"]
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
    to_applicant: str = ""  # the message as said to the applicant, when it speaks of them

    def __post_init__(self):
        self.title = self.title or RULES[self.rule][0]


def message_for(check: dict | Check, applicant_reads: bool) -> str:
    """A check's message as the reader should see it: said to the applicant, or of them to anyone else."""
    data = asdict(check) if isinstance(check, Check) else check
    return (applicant_reads and data.get("to_applicant")) or data["message"]


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

    def errors(self, applicant_reads: bool = True) -> dict[str, list[str]]:
        """Failed checks as Django ValidationError's dict: field → messages ('__all__' for the form)."""
        out: dict[str, list[str]] = {}
        for c in self.failures:
            out.setdefault(c.field or "__all__", []).append(message_for(c, applicant_reads))
        return out

    def as_dict(self) -> dict:
        return {
            "kind": self.kind,
            "passed": self.passed,
            "checks": [asdict(c) for c in self.checks],
            "required_approvals": [{"slot": s, "label": Slot(s).label} for s in self.required_approvals],
        }


class Unknown(Exception):
    """A check read a field whose input the form could not take (that field has its own error)."""


class Partial:
    """The application as far as its form could read it: a field in `unknown` raises Unknown when read."""

    def __init__(self, application, unknown):
        self._application, self._unknown = application, frozenset(unknown)

    def __getattr__(self, name):
        if name in self._unknown or (name.endswith("_id") and name[:-3] in self._unknown):
            raise Unknown(name)
        return getattr(self._application, name)


@dataclass
class RuleSet:
    """A kind's rules as steps, each giving one check (or a few); `slots` names the approvals it needs."""

    kind: str
    steps: list[Callable]
    slots: Callable

    def __call__(self, application, applicant) -> Report:
        checks: list[Check] = []
        for step in self.steps:
            try:
                found = step(application, applicant)
            except Unknown:  # only ever for a Partial application: this check waits for its field
                continue
            checks += found if isinstance(found, list) else [found]
        try:
            slots = self.slots(application)
        except Unknown:
            slots = []
        return Report(self.kind, checks, slots)


def evaluate(application, *, applicant=None, unknown=()) -> Report:
    """Run every rule of the application's kind. The application may be unsaved (dry run). `unknown`: fields
    whose input was refused (a form's field errors); the checks that need them are left out."""
    applicant = applicant or application.applicant
    key = policy_key(application)
    evaluator = EVALUATORS.get(key)
    if evaluator is None and unknown:  # the field naming the kind was refused: no rule set to run yet
        return Report(key)
    if not unknown:
        return EVALUATORS[key](application, applicant)
    if not isinstance(evaluator, RuleSet):  # evaluated in one piece: nothing to say until its fields are right
        return Report(key)
    return evaluator(Partial(application, unknown), applicant)


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
    who = applicant.username
    if is_member(applicant, team):
        return Check("team-member", True, f"{who} is a member of team {team.name}.", field_name,
                     to_applicant=f"You are a member of team {team.name}.")
    return Check("team-member", False, f"{who} is not a member of team {team.name}, which owns {what}.", field_name,
                 to_applicant=f"You are not a member of team {team.name}, which owns {what}; ask one of its members "
                              "to apply.")


def _others(application):
    """Live applications of the same kind, this one excepted."""
    qs = application._meta.model.objects.filter(state__in=LIVE)  # _meta: a Partial application's model too
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


def _topic_team(app, applicant) -> Check:
    return team_check(applicant, app.team, "team", "the topic")


def _naming(app, applicant) -> Check:
    team = app.team
    if re.match(rf"^{re.escape(team.name)}\.{NAME_RE}$", app.name or "") and len(app.name) <= 120:
        return Check("naming", True, f"{app.name} follows the naming rule.", "name")
    return Check("naming", False, f"Topic names start with the owning team's name and a dot, then lowercase words "
                                  f"separated by '.' or '-', e.g. {team.name}.order-created.", "name")


def _unique_name(app, applicant) -> Check:
    taken = Topic.objects.filter(name=app.name, environment=app.environment).exclude(
        status=TopicStatus.DELETED).first()
    asked = _others(app).filter(name=app.name, environment=app.environment, topic__isnull=True).first()
    if taken and taken.status == TopicStatus.RETIRED:
        return Check("unique-name", False, retired_name_message(taken), "name")
    if taken:
        return Check("unique-name", False, f"A topic named {app.name} already exists in "
                                           f"{app.get_environment_display()}.", "name")
    if asked:
        return Check("unique-name", False, f"Application {asked.reference} already asks for {app.name} in "
                                           f"{app.get_environment_display()}.", "name")
    return Check("unique-name", True, f"{app.name} is free in {app.get_environment_display()}.", "name")


def _cluster_fits(app, applicant) -> Check:
    cluster = app.cluster
    if cluster.environment != app.environment:
        return Check("cluster", False, f"Cluster {cluster.name} serves {cluster.get_environment_display()}, "
                                       f"not {app.get_environment_display()}.", "cluster")
    if cluster.status != ClusterStatus.ACTIVE:
        status = "in maintenance" if cluster.status == ClusterStatus.MAINTENANCE else cluster.get_status_display().lower()
        return Check("cluster", False, f"Cluster {cluster.name} is {status}; choose an active cluster.", "cluster")
    return Check("cluster", True, f"Cluster {cluster.name} serves {cluster.get_environment_display()} and is active.",
                 "cluster")


def _storage(app, applicant) -> Check:
    cluster = app.cluster
    if cluster.storage_level == StorageLevel.MEMORY and app.storage_level == StorageLevel.FILE:
        return Check("storage", False, f"Cluster {cluster.name} keeps messages in memory only; choose memory "
                                       "storage or a file-storage cluster.", "storage_level")
    return Check("storage", True, "The cluster offers this storage level.", "storage_level")


def _transactional_durable(app, applicant) -> Check:
    if app.transactional and app.storage_level != StorageLevel.FILE:
        return Check("transactional-durable", False, "A transactional topic needs file storage: half messages must "
                                                     "survive a broker restart.", "transactional")
    return Check("transactional-durable", True, "No transactional topic on memory storage.", "transactional")


def _quota_topics(app, applicant) -> Check:
    lim, team = limits(), app.team
    owned = Topic.objects.filter(team=team).count() + _others(app).filter(team=team, topic__isnull=True).count()
    if owned + 1 > lim["topics_per_team"]:
        return Check("quota-topics", False, f"Team {team.name} already has {owned} topics (requested ones "
                                            f"included); the limit is {lim['topics_per_team']}.")
    return Check("quota-topics", True, f"Team {team.name} would have {owned + 1} of {lim['topics_per_team']} topics.")


def _quota_mps(app, applicant) -> Check:
    lim, team, cluster, peak = limits(), app.team, app.cluster, app.expected_peak_mps
    used = (Topic.objects.filter(team=team, cluster=cluster).aggregate(s=Sum("expected_peak_mps"))["s"] or 0) + \
        (_others(app).filter(team=team, cluster=cluster, topic__isnull=True)
         .aggregate(s=Sum("expected_peak_mps"))["s"] or 0)
    total = used + (peak or 0)
    if total > lim["team_peak_mps_per_cluster"]:
        return Check("quota-mps", False, f"Team {team.name} would expect {total:,} messages/s at peak on "
                                         f"{cluster.name} ({used:,} already); the limit is "
                                         f"{lim['team_peak_mps_per_cluster']:,}.", "expected_peak_mps")
    return Check("quota-mps", True, f"Team {team.name} would expect {total:,} of {lim['team_peak_mps_per_cluster']:,} "
                                    f"messages/s on {cluster.name}.", "expected_peak_mps")


def _topic_prod(app, applicant) -> Check:
    return prod_check(app.cluster)


def tx_check(app, applicant=None) -> Check:
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


def _ordered_broadcast(topic, sub) -> Check:
    if topic.ordered and sub.mode == DeliveryMode.BROADCAST:
        return Check("ordered-broadcast", False, f"Topic {topic.name} is ordered: consume it in clustering mode.", "mode")
    return Check("ordered-broadcast", True, "The delivery mode suits the topic.", "mode")


def _on_failure_ordered(topic, sub) -> Check:
    if not topic.ordered and sub.on_failure == OnFailure.DEAD_LETTER:
        return Check("on-failure-ordered", False, f"Topic {topic.name} is not ordered: on failure dead-letter applies "
                                                  "to ordered topics only; leave it at block.", "on_failure")
    return Check("on-failure-ordered", True, "What a failing message does to its key suits the topic.", "on_failure")


def _selector_matches(topic, sub) -> Check:
    matched = [t for t in topic.message_types if selector_matches(sub.selector_kind, sub.selector_pattern, t)]
    if matched:
        return Check("selector-matches", True, f"The selector receives {', '.join(matched)}.", "selector_pattern")
    return Check("selector-matches", False, f"The selector matches none of {topic.name}'s message types "
                                            f"({', '.join(topic.message_types)}).", "selector_pattern")


def _ttl_retention(topic, sub) -> Check:
    if sub.ttl_s > topic.retention_s:
        return Check("ttl-retention", False, f"The TTL ({sub.ttl_s}s) is longer than {topic.name} keeps messages "
                                             f"({topic.retention_s}s).", "ttl_s")
    return Check("ttl-retention", True, "The TTL fits within the topic's retention.", "ttl_s")


SUBSCRIPTION_CHECKS = (_ordered_broadcast, _on_failure_ordered, _selector_matches, _ttl_retention)


def subscription_checks(topic, sub) -> list[Check]:
    """What a subscription's settings (a binding application's, or a binding's as a change would leave them)
    must satisfy on its topic: delivery mode, selector, TTL."""
    return [check(topic, sub) for check in SUBSCRIPTION_CHECKS]


def _app_team(a, applicant) -> Check:
    return team_check(applicant, a.app.team, "app", f"app {a.app.app_id}")


def _app_active(a, applicant) -> Check:
    return app_active(a.app)


def _topic_active(a, applicant) -> Check:
    return topic_active(a.topic)


def _unique_group(ba, applicant) -> Check:
    topic = ba.topic
    existing = Binding.objects.filter(topic=topic, group=ba.group, status=BindingStatus.ACTIVE).first()
    asked = _others(ba).filter(topic=topic, group=ba.group, binding__isnull=True).first()
    if existing:
        return Check("unique-group", False, f"Group {ba.group} is already bound to {topic.name}.", "group")
    if asked:
        return Check("unique-group", False, f"Application {asked.reference} already asks to bind group {ba.group} "
                                            f"to {topic.name}.", "group")
    return Check("unique-group", True, f"Group {ba.group} is not bound to {topic.name} yet.", "group")


def _group_owner(ba, applicant) -> Check:
    app = ba.app
    other_app = Binding.objects.filter(group=ba.group).exclude(app=app).select_related("app").first()
    if other_app:
        return Check("group-owner", False, f"Group {ba.group} belongs to app {other_app.app.app_id}; "
                                           "choose another group name.", "group")
    return Check("group-owner", True, f"Group {ba.group} is used by app {app.app_id} only.", "group")


def _on_topic(check):
    """A subscription check as a binding application's step (it reads the application's topic and settings)."""
    return lambda ba, applicant: check(ba.topic, ba)


def _quota_bindings(ba, applicant) -> Check:
    lim, topic = limits(), ba.topic
    count = Binding.objects.filter(topic=topic, status=BindingStatus.ACTIVE).count() + \
        _others(ba).filter(topic=topic, binding__isnull=True).count()
    if count + 1 > lim["bindings_per_topic"]:
        return Check("quota-bindings", False, f"{topic.name} has {count} bindings (requested ones included); "
                                              f"the limit is {lim['bindings_per_topic']}.", "topic")
    return Check("quota-bindings", True, f"{topic.name} would have {count + 1} of {lim['bindings_per_topic']} "
                                         "bindings.", "topic")


def _topic_cluster_prod(a, applicant) -> Check:
    return prod_check(a.topic.cluster)


# --- producer grants ------------------------------------------------------------------------


def _unique_grant(ga, applicant) -> Check:
    topic, app = ga.topic, ga.app
    if ProducerGrant.objects.filter(topic=topic, app=app, status=BindingStatus.ACTIVE).exists():
        return Check("unique-grant", False, f"App {app.app_id} may already publish on {topic.name}.", "app")
    if asked := _others(ga).filter(topic=topic, app=app, grant__isnull=True).first():
        return Check("unique-grant", False, f"Application {asked.reference} already asks for this grant.", "app")
    return Check("unique-grant", True, f"App {app.app_id} is not granted {topic.name} yet.", "app")


EVALUATORS = {
    "topic": RuleSet("topic", [_topic_team, _naming, _unique_name, _cluster_fits, _storage, _transactional_durable,
                               tx_check, _quota_topics, _quota_mps, _topic_prod],
                     lambda app: slots_for(app.cluster)),
    "binding": RuleSet("binding", [_app_team, _app_active, _topic_active, _unique_group, _group_owner,
                                   *map(_on_topic, SUBSCRIPTION_CHECKS), _quota_bindings, _topic_cluster_prod],
                       lambda ba: slots_for(ba.topic.cluster)),
    "grant": RuleSet("grant", [_app_team, _app_active, _topic_active, _unique_grant, _topic_cluster_prod],
                     lambda ga: slots_for(ga.topic.cluster)),
}
