"""The back-check sweep and check rounds (docs/transactions.md). Celery tasks call these; the decisions
themselves are recorded through apps.transactions.actions.

sweep_cluster: for each live broker, list the prepared messages older than the smallest check delay of
the cluster's topics, record the new ones, notice the ones their producer resolved meanwhile, claim the
due ones and hand them to check tasks in batches (SWITCHYARD_TX_CHECK_BATCH ids per task).

run_check_round: one batch on one broker: one POST /admin/tx/check for all of them, the app's HTTP check
URL for those without a listening connection (in parallel), one POST /admin/tx/resolve for the answers
and the exhausted ones, then one transaction recording checks and outcomes.
"""

from __future__ import annotations

import json
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx
from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.utils import timezone

from apps.clusters.zookeeper import ZooKeeperUnreachable
from apps.topics.models import TX_CHECK_DEFAULTS, App, Topic
from apps.transactions import actions, outgoing, timing
from apps.transactions.broker_admin import BrokerAdmin, BrokerAdminError, BrokerEndpoint, live_brokers
from apps.transactions.choices import CheckAnswer, CheckVia, Resolution, ResolutionSource, TxState
from apps.transactions.models import PreparedMessage, TxCheck
from control_plane import actors

log = logging.getLogger("apps.transactions.backcheck")

# A claim covers the wait in the queue; a task that starts extends it to cover its own calls.
CLAIM_S = 300
ROUND_S = 60
HTTP_CHECK_THREADS = 16
_SWEEP_LOCK_KEY = 0x5357_5458_5357  # one sweep of a cluster at a time


@dataclass(frozen=True)
class TxTiming:
    delay_s: int
    interval_s: int
    max_checks: int


DEFAULT_TIMING = TxTiming(TX_CHECK_DEFAULTS["delay_s"], TX_CHECK_DEFAULTS["interval_s"],
                          TX_CHECK_DEFAULTS["max_checks"])


def timings_of(cluster) -> dict[str, TxTiming]:
    """The back-check timing of each topic on the cluster, served there or held there while it moves (its
    prepared messages stay and are checked where they were prepared); other topics get the defaults."""
    rows = Topic.objects.filter(Q(cluster=cluster) | Q(placements__cluster=cluster)).distinct().values_list(
        "name", "tx_check_delay_s", "tx_check_interval_s", "tx_check_max", "transactional")
    return {name: TxTiming(d, i, m) for name, d, i, m, _ in rows}


def smallest_delay_s(timings: dict[str, TxTiming]) -> int:
    return min([t.delay_s for t in timings.values()] + [DEFAULT_TIMING.delay_s])


def ms_to_dt(ms: int) -> datetime:
    return datetime.fromtimestamp(ms / 1000, UTC)


# --- the sweep ------------------------------------------------------------------------------


def sweep_cluster(cluster, dispatch) -> dict:
    """One sweep of one cluster; `dispatch(cluster_id, endpoint, pks, claim)` queues a check task."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_try_advisory_lock(%s, %s)", [_SWEEP_LOCK_KEY & 0x7FFFFFFF, cluster.pk])
        if not cur.fetchone()[0]:
            return {"skipped": "another sweep of this cluster is under way"}
    try:
        timings = timings_of(cluster)
        try:
            brokers = live_brokers(cluster)
        except ZooKeeperUnreachable as exc:
            log.warning("tx sweep: ZooKeeper unreachable", extra={"cluster": cluster.name, "error": str(exc)})
            return {"error": str(exc)}
        out = {}
        for endpoint in brokers:
            try:
                out[endpoint.node_id] = sweep_broker(cluster, endpoint, timings, dispatch)
            except BrokerAdminError as exc:
                log.warning("tx sweep: broker did not answer", extra={"cluster": cluster.name,
                                                                      "broker": endpoint.node_id, "error": str(exc)})
                out[endpoint.node_id] = {"error": str(exc)}
        return out
    finally:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s, %s)", [_SWEEP_LOCK_KEY & 0x7FFFFFFF, cluster.pk])


def sweep_broker(cluster, endpoint: BrokerEndpoint, timings: dict[str, TxTiming], dispatch) -> dict:
    older_than_ms = smallest_delay_s(timings) * 1000
    with BrokerAdmin(endpoint) as admin:
        listed = list(admin.iter_prepared(older_than_ms=older_than_ms))
        new = record_listed(cluster, endpoint.node_id, listed, timings)
        producer_resolved = notice_producer_outcomes(cluster, endpoint.node_id, {m["message_id"] for m in listed},
                                                     admin)
    pks, claim = claim_due(cluster, endpoint.node_id)
    batch = max(1, settings.SWITCHYARD_TX_CHECK_BATCH)
    for i in range(0, len(pks), batch):
        dispatch(cluster.pk, endpoint, pks[i:i + batch], claim)
    return {"listed": len(listed), "new": new, "producer_resolved": producer_resolved, "dispatched": len(pks)}


def record_listed(cluster, node_id: str, listed: list[dict], timings: dict[str, TxTiming]) -> int:
    """Insert the prepared messages not seen before (first check due at prepared + the topic's delay)."""
    if not listed:
        return 0
    known = set(PreparedMessage.objects.filter(cluster=cluster, message_id__in=[m["message_id"] for m in listed])
                .values_list("message_id", flat=True))
    rows = []
    for m in listed:
        if m["message_id"] in known:
            continue
        prepared_at = ms_to_dt(int(m["prepared_at_ms"]))
        t = timings.get(m.get("topic") or "", DEFAULT_TIMING)
        rows.append(PreparedMessage(
            cluster=cluster, broker=node_id, message_id=m["message_id"], topic=m.get("topic") or "",
            app_id=m.get("app_id") or "", message_type=(m.get("message_type") or "")[:64], key=m.get("key"),
            business_id=m.get("business_id"), prepared_at=prepared_at,
            next_check_at=timing.first_check_at(prepared_at, t.delay_s)))
    PreparedMessage.objects.bulk_create(rows, batch_size=2000, ignore_conflicts=True)
    return len(rows)


def notice_producer_outcomes(cluster, node_id: str, listed_ids: set[str], admin: BrokerAdmin) -> int:
    """Messages we hold as prepared that the broker no longer lists: their producer (or someone) resolved
    them. Messages under a check task's claim are left to it."""
    now = timezone.now()
    gone = {mid: pk for pk, mid in PreparedMessage.objects.filter(cluster=cluster, broker=node_id,
                                                                  state=TxState.PREPARED)
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now)).values_list("pk", "message_id")
            if mid not in listed_ids}
    if not gone:
        return 0
    states = admin.states(list(gone))
    return actions.note_producer_outcomes({gone[mid]: s for mid, s in states.items()
                                           if mid in gone and s in ("committed", "rolled_back")})


def claim_due(cluster, node_id: str, limit: int = 50_000) -> tuple[list[int], datetime]:
    """Claim the messages due for a check (not claimed by a task now): (their pks, the claim's stamp)."""
    now = timezone.now()
    claim = now + timedelta(seconds=CLAIM_S)
    with transaction.atomic():
        pks = list(PreparedMessage.objects.select_for_update(skip_locked=True)
                   .filter(cluster=cluster, broker=node_id, state=TxState.PREPARED, next_check_at__lte=now)
                   .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lt=now))
                   .order_by("next_check_at", "pk").values_list("pk", flat=True)[:limit])
        if pks:
            PreparedMessage.objects.filter(pk__in=pks).update(claimed_until=claim)
    return pks, claim


# --- a check round ----------------------------------------------------------------------------


def take_claim(pks: list[int], claim: datetime) -> tuple[list[PreparedMessage], datetime]:
    """Keep only the messages still under this claim, and extend it for this round. A task that comes
    after its claim expired (and the sweep claimed the messages again) gets nothing."""
    mine = timezone.now() + timedelta(seconds=ROUND_S)
    with transaction.atomic():
        PreparedMessage.objects.filter(pk__in=pks, claimed_until=claim, state=TxState.PREPARED).update(
            claimed_until=mine)
    rows = list(PreparedMessage.objects.filter(pk__in=pks, claimed_until=mine, state=TxState.PREPARED))
    return rows, mine


def http_check(url: str, payload: dict, timeout: float, *, allowed_hosts: list[str],
               allow_private: bool) -> tuple[str, str]:
    """Ask an app's HTTP check URL; (answer, error). Anything but a 200 with a known state is unknown. The URL
    is called only within the guards of apps.transactions.outgoing (scheme, allow-list, addresses, no
    redirects, size and time limits); a refusal is an unknown answer with the reason as its error."""
    try:
        target = outgoing.check_target(url, allowed_hosts, allow_private)
        status, body = outgoing.post_json(target, payload, timeout)
    except outgoing.Refused as exc:
        log.warning("back-check URL refused", extra={"url": url, "reason": str(exc)})
        return CheckAnswer.UNKNOWN, f"{url} refused: {exc}"
    except (httpx.HTTPError, OSError, ValueError) as exc:
        return CheckAnswer.UNKNOWN, f"{url} did not answer within {timeout:g}s: {exc or type(exc).__name__}"
    if status != 200:
        return CheckAnswer.UNKNOWN, f"{url} answered {status}"
    try:
        state = json.loads(body).get("state")
    except (ValueError, AttributeError):
        return CheckAnswer.UNKNOWN, f"{url} answered something that is not a JSON object"
    if state not in CheckAnswer.values:
        return CheckAnswer.UNKNOWN, f"{url} answered state {state!r} (expected commit, rollback or unknown)"
    return state, ""


def run_check_round(cluster, endpoint: BrokerEndpoint, pks: list[int], claim: datetime) -> dict:
    rows, _ = take_claim(pks, claim)
    if not rows:
        return {"checked": 0}
    timings = timings_of(cluster)
    now = timezone.now()
    round = actions.CheckRound(cluster_name=cluster.name, message_ids={r.pk: r.message_id for r in rows})
    decisions: dict[int, tuple[str, str]] = {}  # pk → (decision, source)
    answers: dict[int, tuple[str, str, str, str, int]] = {}  # pk → (via, answer, connection, error, ms)
    final_states: dict[int, str] = {}  # resolved by someone else meanwhile

    # Messages that used up their checks in an earlier round but whose rollback did not land: roll back now.
    to_check = []
    for r in rows:
        t = timings.get(r.topic, DEFAULT_TIMING)
        if timing.exhausted(r.checks_done, t.max_checks):
            decisions[r.pk] = (Resolution.ROLLBACK, ResolutionSource.EXHAUSTED)
        else:
            to_check.append(r)

    with BrokerAdmin(endpoint) as admin:
        if to_check:
            started = time.monotonic()
            try:
                results = {x["message_id"]: x for x in admin.check([r.message_id for r in to_check])}
                error = ""
            except BrokerAdminError as exc:
                results, error = {}, str(exc)
            elapsed = int((time.monotonic() - started) * 1000)
            by_http = []
            for r in to_check:
                x = results.get(r.message_id)
                if x is None:
                    answers[r.pk] = (CheckVia.NONE, CheckAnswer.UNKNOWN, "", error or "the broker gave no result",
                                     elapsed)
                elif x.get("reason") == "already_resolved" or x.get("state") in actions.FINAL:
                    final_states[r.pk] = x.get("state")
                elif x.get("answer") in CheckAnswer.values:
                    answers[r.pk] = (CheckVia.CONNECTION, x["answer"], x.get("connection") or "", "", elapsed)
                elif x.get("reason") == "no_listener":
                    by_http.append(r)
                else:
                    answers[r.pk] = (CheckVia.CONNECTION if x.get("via") else CheckVia.NONE, CheckAnswer.UNKNOWN,
                                     x.get("connection") or "", f"broker: {x.get('reason') or 'no answer'}", elapsed)
            answers.update(_http_checks(cluster, by_http))

        for pk, (via, answer, conn, error, ms) in answers.items():
            round.checks.append(TxCheck(message_id=pk, at=now, via=via, answer=answer, connection=conn[:255],
                                        error=error, duration_ms=ms))
            if answer in (CheckAnswer.COMMIT, CheckAnswer.ROLLBACK):
                decisions[pk] = (answer, ResolutionSource.CHECK)

        by_pk = {r.pk: r for r in rows}
        unknown = [pk for pk, a in answers.items() if a[1] == CheckAnswer.UNKNOWN]
        for pk in unknown:  # the check counts; the last one allowed rolls the message back
            r = by_pk[pk]
            t = timings.get(r.topic, DEFAULT_TIMING)
            if timing.exhausted(r.checks_done + 1, t.max_checks):
                decisions[pk] = (Resolution.ROLLBACK, ResolutionSource.EXHAUSTED)

        applied: dict[str, dict] = {}
        resolve_error = ""
        if decisions:
            try:
                applied = {x["message_id"]: x for x in admin.resolve([
                    {"message_id": by_pk[pk].message_id, "decision": d, "reason": src}
                    for pk, (d, src) in decisions.items()])}
            except BrokerAdminError as exc:
                resolve_error = f"resolve: {exc}"

    for r in rows:
        t = timings.get(r.topic, DEFAULT_TIMING)
        checked = r.pk in answers
        done = r.checks_done + (1 if checked else 0)
        o = actions.Outcome(pk=r.pk, checks_done=done, last_error=answers.get(r.pk, ("", "", "", r.last_error))[3])
        if r.pk in final_states:
            _final(o, final_states[r.pk], ResolutionSource.PRODUCER)
        elif r.pk in decisions:
            decision, source = decisions[r.pk]
            x = applied.get(r.message_id)
            if x is None or not x.get("state"):
                # the broker did not apply it: keep the message, try again after the interval
                o.last_error = resolve_error or f"resolve: {(x or {}).get('error') or 'no result'}"
                o.next_check_at = now + timedelta(seconds=t.interval_s)
            else:
                real_source = source if not x.get("error") else ResolutionSource.PRODUCER
                _final(o, x["state"], real_source)
                if source == ResolutionSource.EXHAUSTED and real_source == ResolutionSource.EXHAUSTED:
                    o.state = TxState.UNRESOLVED
                    _alert(cluster, r, done)
        else:
            o.next_check_at = timing.next_check_at(now, max(done, 1), t.interval_s)
        round.outcomes.append(o)
    resolved = actions.apply_check_outcomes(actor=actors.TX_BACKCHECK, round=round)
    return {"checked": len(answers), "resolved": resolved, "by_producer": len(final_states)}


def _final(o: actions.Outcome, state: str, source: str) -> None:
    o.state = actions.FINAL.get(state, TxState.ROLLED_BACK)
    o.resolution = Resolution.COMMIT if o.state == TxState.COMMITTED else Resolution.ROLLBACK
    o.resolution_source = source
    o.next_check_at = None


def _alert(cluster, row: PreparedMessage, checks: int) -> None:
    log.error("prepared message unresolved: rolled back after its last back-check",
              extra={"alert": "tx_unresolved", "cluster": cluster.name, "broker": row.broker,
                     "message_id": row.message_id, "topic": row.topic, "app_id": row.app_id,
                     "business_id": row.business_id, "checks_done": checks})


def _http_checks(cluster, rows: list[PreparedMessage]) -> dict[int, tuple[str, str, str, str, int]]:
    """The app's HTTP check URL for messages no connection could answer; in parallel, each bounded."""
    if not rows:
        return {}
    apps = {a: (u, h) for a, u, h in App.objects.filter(app_id__in={r.app_id for r in rows})
            .values_list("app_id", "check_url", "check_hosts")}
    urls = {a: u for a, (u, _) in apps.items()}
    timeout = settings.SWITCHYARD_TX_HTTP_CHECK_TIMEOUT
    out: dict[int, tuple[str, str, str, str, int]] = {}
    asked = []
    for r in rows:
        if urls.get(r.app_id):
            asked.append(r)
        else:
            out[r.pk] = (CheckVia.NONE, CheckAnswer.UNKNOWN, "", "no live connection of the app has a check "
                         "listener and the app has no HTTP check URL", 0)

    def ask(r: PreparedMessage):
        started = time.monotonic()
        answer, error = http_check(urls[r.app_id], {
            "message_id": r.message_id, "topic": r.topic, "message_type": r.message_type, "key": r.key,
            "business_id": r.business_id, "cluster": cluster.name, "app_id": r.app_id}, timeout,
            allowed_hosts=apps[r.app_id][1] or [], allow_private=cluster.backcheck_allow_private)
        return r.pk, (CheckVia.HTTP, answer, urls[r.app_id][:255], error, int((time.monotonic() - started) * 1000))

    if asked:
        with ThreadPoolExecutor(max_workers=min(HTTP_CHECK_THREADS, len(asked))) as pool:
            out.update(dict(pool.map(ask, asked)))
    return out
