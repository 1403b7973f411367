"""The policy rules of lifecycle applications (change, retire, remove, revoke, deactivate, reactivate).

They join the rule sets of apps/governance/policy.py (`register_rules`, from the app's ready()), so the workflow,
the dry run and the forms treat them like any other: checks in words, the field each concerns, the slots needed.
"""

from __future__ import annotations

from apps.bindings.choices import BindingStatus, SelectorKind
from apps.bindings.models import Binding, selector_matches
from apps.clusters.choices import Environment
from apps.clusters.models import Cluster
from apps.clusters.rescale import read_rescale
from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.governance import policy
from apps.governance.policy import Check, Report
from apps.governance.workflow import Slot, State
from apps.lifecycle import targets
from apps.lifecycle.choices import Operation, Target
from apps.lifecycle.models import TARGET_FIELDS, LifecycleApplication
from apps.provisioning.desired import clusters_of_app
from apps.provisioning.placement import holders
from apps.topics.choices import TopicStatus
from apps.topics.models import Topic

TEXTS: dict[str, tuple[str, str]] = {
    "applicant-team": ("Applicant belongs to the team",
                       "A topic's owners apply for its changes and retirement; an app's team for the app and its "
                       "binding changes; a binding's removal or a grant's revocation may come from either the app's "
                       "team or the topic's owners."),
    "target-state": ("It can be done now",
                     "Topics and bindings change only while active (a binding of a retired topic too, while it "
                     "drains); a topic is retired once; an app is deactivated while active and reactivated while "
                     "deactivated."),
    "one-open": ("One open application per object",
                 "An object has at most one pending lifecycle application; decide or withdraw that one first."),
    "not-stale": ("Made against the current version",
                  "A change is decided against the values it shows as before; when the object changed since it was "
                  "submitted, withdraw it and apply again."),
    "types-in-use": ("Removed message types are not needed",
                     "A message type can be removed only when no active binding needs it: no binding's selector "
                     "matches it (a selector receiving every type, wildcard * or regex .*, excepted) and none would "
                     "be left matching no remaining type."),
    "retention-ttl": ("Retention covers the bindings' TTL",
                      "A topic keeps messages at least as long as the TTL of every active binding."),
    "rescale-drained": ("The previous rescale drained",
                        "An ordered topic's partition count changes again only once the keys its previous change moved "
                        "are finished on their old partitions by every bound group (the brokers' drain markers in "
                        "each holding cluster's ZooKeeper; the topic page shows them). Refused while ZooKeeper cannot "
                        "be read."),
    "drain": ("What retiring does",
              "New publishes are refused at once; each binding stays until its backlog is consumed or an SRE drops "
              "it; once no binding is left, the topic's data is deleted retention_hours after retirement and its "
              "name is free again."),
    "removal": ("What removing does", "The node leaves the cluster's ZooKeeper: the brokers stop delivering to the "
                                      "group, or refuse the app's publishes, at once."),
    "app-use": ("What deactivating does", "Brokers refuse the app's connections at once; its bindings and grants stay "
                                          "and work again when it is reactivated."),
}

COMMON = ["applicant-team", "target-state", "one-open"]
RULE_SETS = {
    "topic-change": [*COMMON, "not-stale", "types-in-use", "retention-ttl", "tx-check", "quota-topics",
                     "rescale-drained", "prod-approval"],
    "topic-retire": [*COMMON, "drain", "prod-approval"],
    "binding-change": [*COMMON, "not-stale", "ordered-broadcast", "selector-matches", "ttl-retention",
                       "prod-approval"],
    "binding-remove": [*COMMON, "removal", "prod-approval"],
    "grant-revoke": [*COMMON, "removal", "prod-approval"],
    "app-deactivate": [*COMMON, "app-use", "prod-approval"],
    "app-activate": [*COMMON, "prod-approval"],
}
CATCH_ALL = {SelectorKind.WILDCARD: {"*"}, SelectorKind.REGEX: {".*", ".+", "(.*)"}}


def register_rules() -> None:
    for key, rules in RULE_SETS.items():
        policy.register(key, evaluate, rules, TEXTS)
    every = list(dict.fromkeys(rule for rules in RULE_SETS.values() for rule in rules))
    policy.register("lifecycle", evaluate, every, TEXTS)


def evaluate(application, applicant) -> Report:
    target = application.target
    checks = [_applicant(application, applicant), _state(application, target), _one_open(application)]
    if application.operation == Operation.CHANGE:
        checks.append(_not_stale(application, target))
        changed = targets.would_be(target, application.changes)
        if application.target_kind == Target.TOPIC:
            checks += _topic_change(application, target, changed)
        else:
            checks += policy.subscription_checks(target.topic, changed)
    elif application.operation == Operation.RETIRE:
        checks.append(_drain(target))
    elif application.operation in (Operation.REMOVE, Operation.REVOKE):
        checks.append(Check("removal", True, f"{application.kind_label.capitalize()}: {application.target_name()} "
                                             "leaves ZooKeeper once approved."))
    elif application.operation == Operation.DEACTIVATE:
        checks.append(_app_use(target))
    clusters = _clusters(application)
    production = [c for c in clusters if c.environment == Environment.PROD]
    checks.append(_prod(production, clusters))
    return Report(application.policy_key, checks, [Slot.OWNER, Slot.SRE] if production else [Slot.OWNER])


def _applicant(application, applicant) -> Check:
    teams, field = application.applying_teams()
    names = " or ".join(t.name for t in teams)
    if any(policy.is_member(applicant, t) for t in teams):
        return Check("applicant-team", True, f"{applicant.username} may apply: a member of team {names}.", field,
                     to_applicant=f"You may apply: you belong to team {names}.")
    return Check("applicant-team", False, f"Only members of team {names} apply for a {application.kind_label}; ask "
                                          "one of them.", field)


def _state(application, target) -> Check:
    kind, op = application.target_kind, application.operation
    field = TARGET_FIELDS[kind]
    if kind == Target.APP:
        ok = target.active if op == Operation.DEACTIVATE else not target.active
        now = "active" if target.active else "deactivated"
        return Check("target-state", ok, f"App {target.app_id} is {now}.", field)
    if kind == Target.TOPIC:
        ok = target.status == TopicStatus.ACTIVE
        return Check("target-state", ok, f"Topic {target.name} is {target.get_status_display().lower()}"
                                         + ("." if ok else f"; only an active topic can be {op}d."), field)
    topic_ok = target.topic.status != TopicStatus.DELETED
    ok = target.status == BindingStatus.ACTIVE and topic_ok
    what = "Binding" if kind == Target.BINDING else "Grant"
    state = target.get_status_display().lower() if topic_ok else "gone with its deleted topic"
    return Check("target-state", ok, f"{what} {application.target_name()} is {state}"
                                     + ("." if ok else f"; only an active one can be {op}d."), field)


def _one_open(application) -> Check:
    field = TARGET_FIELDS[application.target_kind]
    others = LifecycleApplication.objects.filter(state=State.PENDING, target_kind=application.target_kind,
                                                 **{field: application.target})
    if application.pk:
        others = others.exclude(pk=application.pk)
    other = others.first()
    if other:
        return Check("one-open", False, f"Application {other.reference} ({other.kind_label}) is already pending for "
                                        f"{application.target_name()}; wait for its decision or ask its applicant "
                                        f"({other.applicant.username}) to withdraw it.", field)
    return Check("one-open", True, f"No other application is pending for {application.target_name()}.", field)


def _not_stale(application, target) -> Check:
    if application.base_revision is not None and application.base_revision != target.revision:
        return Check("not-stale", False, f"{application.target_name()} changed since this application was made "
                                         f"(revision {application.base_revision}, now {target.revision}): the values "
                                         "shown as before are out of date; withdraw it and apply again.", "changes")
    return Check("not-stale", True, f"Made against revision {target.revision}, the current one.", "changes")


def _is_catch_all(binding) -> bool:
    return binding.selector_pattern in CATCH_ALL.get(binding.selector_kind, set())


def _topic_change(application, topic, changed) -> list[Check]:
    checks = []
    bindings = list(Binding.objects.filter(topic=topic, status=BindingStatus.ACTIVE).select_related("app"))
    removed = [t for t in topic.message_types if t not in changed.message_types]
    needing = []
    for b in bindings:
        hits = [t for t in removed if selector_matches(b.selector_kind, b.selector_pattern, t)]
        left = [t for t in changed.message_types if selector_matches(b.selector_kind, b.selector_pattern, t)]
        if (hits and not _is_catch_all(b)) or (hits and not left):
            needing.append(f"binding {b.group} (app {b.app.app_id}, selector {b.selector_kind} "
                           f"{b.selector_pattern!r}) receives {', '.join(hits)}")
    if needing:
        checks.append(Check("types-in-use", False, f"Message type{'s' if len(removed) > 1 else ''} "
                                                   f"{', '.join(removed)} cannot be removed: {'; '.join(needing)}. "
                                                   "Change or remove those bindings first (a binding change or "
                                                   "removal application), then remove the type.", "message_types"))
    elif removed:
        checks.append(Check("types-in-use", True, f"No binding needs {', '.join(removed)}.", "message_types"))
    else:
        checks.append(Check("types-in-use", True, "No message type is removed.", "message_types"))

    longest = max(bindings, key=lambda b: b.ttl_s, default=None)
    if longest and longest.ttl_s > changed.retention_s:
        checks.append(Check("retention-ttl", False, f"Binding {longest.group} keeps messages for delivery up to "
                                                    f"{longest.ttl_s:,} s, longer than the new retention "
                                                    f"({changed.retention_s:,} s); shorten its TTL first or keep a "
                                                    "longer retention.", "retention_hours"))
    else:
        checks.append(Check("retention-ttl", True, "The retention covers every binding's TTL.", "retention_hours"))
    checks.append(policy.tx_check(changed))

    if changed.team_id != topic.team_id:
        lim = policy.limits()
        owned = Topic.objects.filter(team=changed.team).exclude(status=TopicStatus.DELETED).count()
        ok = owned + 1 <= lim["topics_per_team"]
        checks.append(Check("quota-topics", ok, f"Team {changed.team.name} would own {owned + 1} of "
                                                f"{lim['topics_per_team']} topics." if ok else
                            f"Team {changed.team.name} already owns {owned} topics; the limit is "
                            f"{lim['topics_per_team']}.", "team"))
    if changed.partition_count != topic.partition_count:
        checks.append(_rescale_drained(topic, changed.partition_count))
    return checks


def _rescale_drained(topic, partitions: int) -> Check:
    """An ordered topic's new partition count waits until its previous rescale drained in every holding cluster
    (read there now; refused when a cluster's ZooKeeper does not answer)."""
    change = f"{topic.partition_count} → {partitions} partitions"
    if not topic.ordered:
        return Check("rescale-drained", True, f"{change}: not ordered, so no key waits; the new mapping is written "
                                              "when approved.", "partitions")
    drained = []
    for cluster in holders(topic):
        try:
            state = read_rescale(cluster, topic.name, ordered=True)
        except ZooKeeperUnreachable as exc:
            return Check("rescale-drained", False, f"Whether the previous rescale of {topic.name} drained cannot be "
                                                   f"read: the ZooKeeper of cluster {cluster.name} does not answer "
                                                   f"({exc}). A partition change of an ordered topic is refused until "
                                                   "it can be read; try again later.", "partitions")
        if state is not None and not state.drained:
            return Check("rescale-drained", False, f"The previous rescale of {topic.name} (mapping version "
                                                   f"{state.mapping.version}, {state.mapping.previous} → "
                                                   f"{state.mapping.partitions} partitions) has not drained on "
                                                   f"cluster {cluster.name}: {state.owed_text()}. Apply again once "
                                                   "the topic page shows it drained.", "partitions")
        if state is not None and state.mapping.version:
            drained.append(f"version {state.mapping.version} on {cluster.name}")
    done = f"the previous rescale drained ({', '.join(drained)})" if drained else "never rescaled before"
    return Check("rescale-drained", True, f"{change}: {done}; keys that move are delivered from their new "
                                          "partition once their groups finished them on the old one.", "partitions")


def _drain(topic) -> Check:
    bindings = Binding.objects.filter(topic=topic, status=BindingStatus.ACTIVE).count()
    return Check("drain", True, f"Publishes to {topic.name} are refused once approved; its {bindings} binding"
                                f"{'s' if bindings != 1 else ''} drain first; its data is deleted "
                                f"{topic.retention_hours} hours after retirement at the earliest.")


def _app_use(app) -> Check:
    bindings = Binding.objects.filter(app=app, status=BindingStatus.ACTIVE).count()
    grants = app.grants.filter(status=BindingStatus.ACTIVE).count()
    return Check("app-use", True, f"Brokers refuse {app.app_id} once approved; its {bindings} binding(s) and "
                                  f"{grants} grant(s) stay and work again if it is reactivated.", "app")


def _clusters(application) -> list:
    if application.target_kind == Target.APP:
        return list(Cluster.objects.filter(pk__in=clusters_of_app(application.app)))
    return holders(application.topic)


def _prod(production, clusters) -> Check:
    if production:
        return Check("prod-approval", True, f"{', '.join(c.name for c in production)} is production: an SRE "
                                            "approves besides the owning team's approver.")
    names = ", ".join(c.name for c in clusters) or "no cluster yet"
    return Check("prod-approval", True, f"Not production ({names}): the owning team's approver decides.")
