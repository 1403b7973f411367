"""Every alarm kind, fired by Prometheus' own rule evaluator (`promtool test rules`).

For each kind a rule is made through the actions, rendered by the control plane's own code
(apps.alerts.rendering.prometheus_rules), and run over input series crafted for that kind: the series as
Prometheus scrapes them (the brokers' figures with the target's `cluster` and `node`, the control plane's, `up`),
plus neighbours the rule must not count (another group, topic or cluster). Each case says at which times nothing
may fire (below the threshold, at it, still pending for `for_seconds`, back below) and at which times exactly one
alert (or the listed ones) fires, with every label and annotation written out. promtool fails the run on any
alert missing, extra or labelled otherwise.
"""

from __future__ import annotations

import json
import subprocess

import pytest

pytestmark = pytest.mark.django_db

CLUSTER, OTHER_CLUSTER = "dev-a", "prod-a"
TOPIC, OTHER_TOPIC = "payments.order-paid", "payments.order-refunded"


def broker(metric: str, node: str, cluster: str = CLUSTER, **labels: str) -> str:
    """A broker's figure as Prometheus stores it (job and instance of the target, its cluster and node)."""
    port = {"n1": 29840, "n2": 29841}.get(node, 29850)
    pairs = {"job": "switchyard-brokers", "instance": f"127.0.0.1:{port}", "cluster": cluster, "node": node, **labels}
    return metric + "{" + ", ".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def control_plane(metric: str, **labels: str) -> str:
    pairs = {"job": "switchyard-control-plane", "instance": "127.0.0.1:29810", **labels}
    return metric + "{" + ", ".join(f'{k}="{v}"' for k, v in pairs.items()) + "}"


def group(metric: str, node: str, grp: str = "billing", topic: str = TOPIC, cluster: str = CLUSTER) -> str:
    return broker(metric, node, cluster, topic=topic, group=grp)


# Series sampled every 30 s and rules evaluated every 30 s. Values use promtool's notation: 'a+bxn' is a, a+b, …
# (n+1 samples); 'stale' is the marker Prometheus writes when a target goes away.
CASES = {
    "lag_age": {
        "rules": [dict(name="billing lag", topic=True, group="billing", threshold=60, for_seconds=120)],
        "series": {
            group("switchyard_group_oldest_age_seconds", "n1"): "30+0x26",
            # 0 until 1m30s, exactly the threshold 2m–4m, above it 4m30s–9m30s, below from 10m
            group("switchyard_group_oldest_age_seconds", "n2"): "0+0x3 60+0x4 90+0x10 20+0x6",
            group("switchyard_group_oldest_age_seconds", "n1", grp="shipping"): "500+0x26",
            group("switchyard_group_oldest_age_seconds", "n1", topic=OTHER_TOPIC): "500+0x26",
        },
        # 4m: at the threshold, not above; 6m: pending since 4m30s; 7m and 9m30s: firing; 10m30s: back below
        "quiet": ["4m", "6m", "10m30s"],
        "firing": {"7m": ["90"], "9m30s": ["90"]},
        "labels": [{"topic": TOPIC, "group": "billing"}],
        "summaries": [f"billing lag: oldest waiting message older than 60 s on {CLUSTER} / {TOPIC} / billing"],
    },
    "backlog": {
        "rules": [dict(name="billing backlog", topic=True, group="billing", threshold=1000, for_seconds=60)],
        "series": {  # summed over the brokers: 900 until 2m30s, 1100 from 3m, 700 from 8m
            group("switchyard_group_depth", "n1"): "600+0x15 200+0x5",
            group("switchyard_group_depth", "n2"): "300+0x5 500+0x15",
            group("switchyard_group_depth", "n1", grp="shipping"): "5000+0x20",
        },
        "quiet": ["2m30s", "3m30s", "8m30s"],
        "firing": {"4m30s": ["1.1k"], "7m30s": ["1.1k"]},
        "labels": [{"topic": TOPIC, "group": "billing"}],
        "summaries": [f"billing backlog: backlog above 1000 messages on {CLUSTER} / {TOPIC} / billing"],
    },
    "no_consumers": {
        "rules": [dict(name="billing consumers", topic=True, group="billing", for_seconds=60)],  # threshold 1
        "series": {  # one consumer on n1 until 2m30s, none 3m–7m30s, one again from 8m
            group("switchyard_group_consumers", "n1"): "1+0x5 0+0x9 1+0x5",
            group("switchyard_group_consumers", "n2"): "0+0x19",
            group("switchyard_group_consumers", "n1", grp="shipping"): "0+0x19",
        },
        "quiet": ["2m30s", "3m30s", "8m30s"],
        "firing": {"4m": ["0"], "7m30s": ["0"]},
        "labels": [{"topic": TOPIC, "group": "billing"}],
        "summaries": [f"billing consumers: fewer consumers connected than 1 on {CLUSTER} / {TOPIC} / billing"],
    },
    "auth_failures": {
        "rules": [dict(name="refused logins", threshold=20, for_seconds=60)],
        "series": {
            # a broker that has refused 1,000 so far: one more every 30 s until 6m (10 in 5 minutes), then 20 every
            # 30 s; it restarts at 10m (its counter from 0 again) and goes on refusing; quiet from 13m30s
            broker("switchyard_broker_auth_failures_total", "n1"): "1000+1x12 1032+20x6 0+20x6 120+0x14",
            broker("switchyard_broker_auth_failures_total", "n2"): "0+0x41",
            broker("switchyard_broker_auth_failures_total", "n1", cluster=OTHER_CLUSTER): "0+100x41",
        },
        # 6m: 10 in 5 minutes; 7m: above since 6m30s, pending; 19m: none in the last 5 minutes
        "quiet": ["6m", "7m", "19m"],
        # what increase() gives over [t-5m, t] (samples at both ends, so nothing to extrapolate):
        # 8m: 1006 at 3m → 1092 at 8m = 86; 12m: 1052 at 7m → 1152, the restart, 0 → 80 = 180
        "firing": {"8m": ["86"], "12m": ["180"]},
        "labels": [{}],
        "summaries": [f"refused logins: more than 20 authentication failures in 5 minutes on {CLUSTER}"],
    },
    "trace_dropped": {
        "rules": [dict(name="lost traces", threshold=0, for_seconds=60)],
        "series": {
            # a broker whose trace process falls behind from 5m30s to 8m30s (100 events dropped every 30 s), then keeps up
            broker("switchyard_broker_trace_events_dropped_total", "n1"): "0+0x10 0+100x6 600+0x23",
            broker("switchyard_broker_trace_events_dropped_total", "n2"): "0+0x41",
            broker("switchyard_broker_trace_events_dropped_total", "n1", cluster=OTHER_CLUSTER): "0+100x41",
        },
        # 5m30s: none yet; 6m30s: above since 6m, pending; 14m: none in the last 5 minutes
        "quiet": ["5m30s", "6m30s", "14m"],
        # 7m30s: 0 at 2m30s → 400 at 7m30s; 9m: 0 at 4m → 600 at 9m
        "firing": {"7m30s": ["400"], "9m": ["600"]},
        "labels": [{}],
        "summaries": [f"lost traces: more than 0 trace events dropped in 5 minutes (a trace process too far behind) "
                      f"on {CLUSTER}"],
    },
    "unresolved_tx": {
        "rules": [dict(name="order-paid unresolved", topic=True, threshold=0, for_seconds=0),
                  dict(name="any unresolved", threshold=5, for_seconds=0)],
        "series": {
            control_plane("switchyard_tx_unresolved_total", cluster=CLUSTER, topic=TOPIC): "0+0x3 2+0x4 9+0x4 0+0x3",
            control_plane("switchyard_tx_unresolved_total", cluster=CLUSTER, topic=OTHER_TOPIC): "7+0x15",
            control_plane("switchyard_tx_unresolved_total", cluster=OTHER_CLUSTER, topic=TOPIC): "50+0x15",
        },
        # the topic's rule (above 0) and the cluster's (above 5, one alert per topic); never the other cluster's
        "firing_of": {"1m30s": [(1, OTHER_TOPIC, "7")],
                      "2m": [(0, TOPIC, "2"), (1, OTHER_TOPIC, "7")],
                      "4m30s": [(0, TOPIC, "9"), (1, TOPIC, "9"), (1, OTHER_TOPIC, "7")],
                      "7m30s": [(1, OTHER_TOPIC, "7")]},
        "summaries": [f"order-paid unresolved: more than 0 unresolved transaction messages on {CLUSTER} / {TOPIC}",
                      f"any unresolved: more than 5 unresolved transaction messages on {CLUSTER}"],
    },
    "broker_down": {
        "rules": [dict(name="brokers", threshold=2, for_seconds=30)],
        "series": {
            # n2 down (its target still listed) 2m–3m, back 3m30s, gone from the targets at 5m30s; n1 gone at 7m
            broker("up", "n1"): "1+0x13 stale",
            broker("up", "n2"): "1+0x3 0+0x2 1+0x3 stale",
            broker("up", "n9", cluster=OTHER_CLUSTER): "1+0x20",
        },
        "quiet": ["1m30s", "2m", "3m30s", "5m30s"],
        "firing": {"2m30s": ["1"], "6m30s": ["1"], "7m30s": ["0"]},
        "labels": [{}],
        "summaries": [f"brokers: fewer live brokers than 2 on {CLUSTER}"],
    },
    "zookeeper_drift": {
        "rules": [dict(name="drift", threshold=0, for_seconds=60)],
        "series": {
            control_plane("switchyard_zookeeper_drift_objects", cluster=CLUSTER): "0+0x3 3+0x6 0+0x4",
            control_plane("switchyard_zookeeper_drift_objects", cluster=OTHER_CLUSTER): "5+0x13",
        },
        "quiet": ["1m30s", "2m30s", "5m30s"],
        "firing": {"3m": ["3"], "5m": ["3"]},
        "labels": [{}],
        "summaries": [f"drift: more than 0 ZooKeeper nodes drifted on {CLUSTER}"],
    },
    "under_replicated": {
        "rules": [dict(name="replicas", threshold=0, for_seconds=60)],
        "series": {  # two partitions under-replicated 1m30s–4m30s (a broker down), none after; never the other cluster
            control_plane("switchyard_under_replicated_partitions", cluster=CLUSTER): "0+0x2 2+0x6 0+0x5",
            control_plane("switchyard_under_replicated_partitions", cluster=OTHER_CLUSTER): "4+0x13",
        },
        # 1m: none yet; 2m: pending since 1m30s; 3m and 4m: firing; 5m: back to none
        "quiet": ["1m", "2m", "5m"],
        "firing": {"3m": ["2"], "4m": ["2"]},
        "labels": [{}],
        "summaries": [f"replicas: more than 0 partitions under-replicated on {CLUSTER}"],
    },
}


@pytest.fixture
def estate(people, make_cluster, approved_topic):
    dev = make_cluster(CLUSTER)
    return dev, approved_topic(dev)


def make_rules(people, cluster, topic, specs):
    from apps.alerts import actions

    made = []
    for spec in specs:
        spec = dict(spec)
        named_topic = topic if spec.pop("topic", False) else None
        made.append(actions.create_rule(actor=people.sre, kind=spec.pop("kind"), cluster=cluster, topic=named_topic,
                                        **spec))
    return made


def expected_alert(rule, labels: dict, summary: str, value: str, cluster_label: bool = True) -> dict:
    """The alert as Prometheus should fire it: the rule's own labels (written out here, not read from the
    rendering), the labels the expression keeps, the summary and the value."""
    exp = {"rule_id": str(rule.pk), "rule": rule.name, "kind": rule.kind, "cluster": CLUSTER, **labels}
    return {"exp_labels": exp, "exp_annotations": {"summary": summary, "value": value}}


def run_promtool(tmp_path, rules, alertname: str, series: dict, checks: dict[str, list[dict]]):
    from apps.alerts.rendering import prometheus_rules

    (tmp_path / "rules.yml").write_text(prometheus_rules(rules))
    test = {
        "rule_files": ["rules.yml"],
        "evaluation_interval": "30s",
        "tests": [{
            "interval": "30s",
            "input_series": [{"series": s, "values": v} for s, v in series.items()],
            "alert_rule_test": [{"eval_time": at, "alertname": alertname, "exp_alerts": alerts}
                                for at, alerts in checks.items()],
        }],
    }
    (tmp_path / "test.yml").write_text(json.dumps(test, indent=1))  # JSON is YAML
    return subprocess.run(["promtool", "test", "rules", "test.yml"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=60)


def checks_of(case, rules) -> dict[str, list[dict]]:
    if "firing_of" in case:  # several rules, several topics
        return {at: [expected_alert(rules[i], {"topic": topic}, case["summaries"][i], value)
                     for i, topic, value in firing] for at, firing in case["firing_of"].items()}
    [rule] = rules
    checks = {at: [] for at in case["quiet"]}
    for at, values in case["firing"].items():
        checks[at] = [expected_alert(rule, labels, summary, value)
                      for labels, summary, value in zip(case["labels"], case["summaries"], values, strict=True)]
    return checks


@pytest.mark.parametrize("kind", list(CASES))
def test_each_kind_fires_exactly_above_its_threshold_after_its_for_duration(kind, people, estate, tmp_path):
    from apps.alerts.choices import RuleKind
    from apps.alerts.rendering import ALERT_NAMES

    case = CASES[kind]
    cluster, topic = estate
    rules = make_rules(people, cluster, topic, [{"kind": kind, **spec} for spec in case["rules"]])
    result = run_promtool(tmp_path, rules, ALERT_NAMES[RuleKind(kind)], case["series"], checks_of(case, rules))
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr


def test_every_kind_has_a_case():
    from apps.alerts.choices import RuleKind

    assert set(CASES) == set(RuleKind.values)


def test_a_wrong_expectation_fails_the_run(people, estate, tmp_path):
    """The harness can fail: expecting the lag alarm while it is still pending, or a label it lacks, is reported."""
    case = CASES["lag_age"]
    cluster, topic = estate
    [rule] = make_rules(people, cluster, topic, [{"kind": "lag_age", **case["rules"][0]}])
    alert = expected_alert(rule, case["labels"][0], case["summaries"][0], "90")
    early = run_promtool(tmp_path, [rule], "SwitchyardLagAge", case["series"], {"6m": [alert]})
    assert early.returncode != 0 and "FAILED" in early.stdout + early.stderr
    mislabelled = {**alert, "exp_labels": {**alert["exp_labels"], "group": "shipping"}}
    wrong = run_promtool(tmp_path, [rule], "SwitchyardLagAge", case["series"], {"7m": [mislabelled]})
    assert wrong.returncode != 0 and "FAILED" in wrong.stdout + wrong.stderr


def test_a_rule_name_with_template_braces_is_taken_literally(people, estate, tmp_path):
    """Labels and annotations are Go templates to Prometheus: a rule named with '{{' must neither break the rule file
    (which would stop every alarm) nor be expanded."""
    cluster, topic = estate
    name = "backlog {{ $value }} {{ oops"
    [rule] = make_rules(people, cluster, topic, [{"kind": "backlog", "name": name, "topic": True, "group": "billing",
                                                  "threshold": 1000, "for_seconds": 60}])
    case = CASES["backlog"]
    summary = f"{name}: backlog above 1000 messages on {CLUSTER} / {TOPIC} / billing"
    alert = expected_alert(rule, {"topic": TOPIC, "group": "billing"}, summary, "1.1k")
    result = run_promtool(tmp_path, [rule], "SwitchyardBacklog", case["series"], {"2m30s": [], "4m30s": [alert]})
    assert result.returncode == 0 and "SUCCESS" in result.stdout, result.stdout + result.stderr
