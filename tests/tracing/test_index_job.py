"""The index job end to end on real Spark and PostgreSQL: incremental, idempotent, one summary per message."""

import pyarrow.parquet as pq
import pytest
from django.db import connection

from apps.tracing.models import TracedMessage
from apps.tracing.queries import timeline_of
from apps.tracing.runner import jdbc_password, jdbc_url
from spark_jobs import trace_index

pytestmark = pytest.mark.django_db(transaction=True)


def database() -> dict:
    """Where the job loads the lookup tables: the test database, the password given apart from the URL."""
    return {"jdbc_url": jdbc_url(), "jdbc_password": jdbc_password()}


def quiet(*args, **kwargs):
    pass


def snapshot():
    with connection.cursor() as cur:
        cur.execute("SELECT * FROM tracing_message ORDER BY message_id")
        return cur.fetchall()


def loaded_events() -> int:
    return sum(len(timeline_of(m)) for m in TracedMessage.objects.all())


def steps(message_id):
    return [(e.event, e.group_name, e.attempt) for e in timeline_of(TracedMessage.objects.get(message_id=message_id))]


def timeline_steps(spark, output, message_id):
    [row] = spark.read.parquet(f"{output}/messages").where(f"message_id = '{message_id}'").select("timeline").collect()
    return [(e.event, e.group, e.attempt) for e in row.timeline]


def indexed_event_count(spark, output):
    return spark.read.parquet(f"{output}/messages").selectExpr("sum(size(timeline))").first()[0]


def test_batches_update_messages_in_place_and_rerunning_changes_nothing(spark, trace_batch, tmp_path):
    inputs, output = [str(tmp_path / "brokers")], str(tmp_path / "index")
    run = lambda **kw: trace_index.run(spark, inputs, output, **database(), progress=quiet, **kw)  # noqa: E731

    first = trace_batch()
    first.emit("published", "m-ack", 0, app_id="shop", business_id="order-1", key="cust-1")
    first.emit("stored", "m-ack", 1)
    first.emit("delivered", "m-ack", 10, group="billing", consumer="c1", attempt=1)
    first.emit("acked", "m-ack", 12, group="billing", consumer="c1", attempt=1)
    first.emit("published", "m-retry", 20, app_id="shop", business_id="order-2")
    first.emit("stored", "m-retry", 21)
    first.emit("delivered", "m-retry", 30, group="billing", consumer="c1", attempt=1)
    first.emit("nacked", "m-retry", 31, group="billing", consumer="c1", attempt=1)
    first.emit("prepared", "m-tx", 40, app_id="shop", message_type="transaction")
    first.emit("rolled_back", "m-tx", 45, app_id="shop", message_type="transaction")
    first.close()

    result = run()
    assert (result["new_files"], result["new_events"], result["messages"]) == (1, 10, 3)
    assert dict(TracedMessage.objects.values_list("message_id", "final_state")) == {
        "m-ack": "acked", "m-retry": "retrying", "m-tx": "rolled_back"}
    before = snapshot()

    # the same files again: the checkpoint says there is nothing new, and nothing changes
    assert run()["new_files"] == 0
    assert snapshot() == before

    second = trace_batch()  # a later file of the same broker: m-retry goes on, two new messages
    second.emit("delivered", "m-retry", 50, group="billing", consumer="c2", attempt=2)
    second.emit("nacked", "m-retry", 51, group="billing", consumer="c2", attempt=2)
    second.emit("delivered", "m-retry", 60, group="billing", consumer="c1", attempt=3)
    second.emit("acked", "m-retry", 61, group="billing", consumer="c1", attempt=3)
    second.emit("published", "m-dlq", 70, app_id="shop", business_id="order-3")
    second.emit("stored", "m-dlq", 71)
    second.emit("delivered", "m-dlq", 80, group="billing", consumer="c1", attempt=1)
    second.emit("timed_out", "m-dlq", 90, group="billing", consumer="c1", attempt=1)
    second.emit("dead_lettered", "m-dlq", 91, group="billing", attempt=1, detail="delivery limit reached")
    second.close()

    result = run()
    assert (result["new_files"], result["new_events"], result["messages"], result["replaced_files"]) == (1, 9, 2, 1)
    assert dict(TracedMessage.objects.values_list("message_id", "final_state")) == {
        "m-ack": "acked", "m-retry": "acked", "m-tx": "rolled_back", "m-dlq": "dead_lettered"}
    retry = TracedMessage.objects.get(message_id="m-retry")
    assert (retry.attempts, retry.event_count, retry.business_id, retry.groups[0]["nacks"]) == (3, 8, "order-2", 2)
    assert steps("m-retry") == [
        ("published", None, None), ("stored", None, None),
        ("delivered", "billing", 1), ("nacked", "billing", 1),
        ("delivered", "billing", 2), ("nacked", "billing", 2),
        ("delivered", "billing", 3), ("acked", "billing", 3)]
    assert loaded_events() == 19

    # the Parquet index holds one row per message, with every event once in its ordered timeline
    summaries = spark.read.parquet(f"{output}/messages")
    assert sorted(r.message_id for r in summaries.select("message_id").collect()) == [
        "m-ack", "m-dlq", "m-retry", "m-tx"]
    assert timeline_steps(spark, output, "m-retry") == [
        ("published", None, None), ("stored", None, None),
        ("delivered", "billing", 1), ("nacked", "billing", 1),
        ("delivered", "billing", 2), ("nacked", "billing", 2),
        ("delivered", "billing", 3), ("acked", "billing", 3)]
    assert indexed_event_count(spark, output) == 19

    # reading every file again (checkpoint ignored) finds only known events: nothing changes
    before = snapshot()
    result = run(full=True)
    assert (result["new_files"], result["new_events"]) == (2, 0)
    assert snapshot() == before
    assert spark.read.parquet(f"{output}/messages").count() == 4
    assert indexed_event_count(spark, output) == 19


def test_a_copy_of_a_trace_file_adds_no_event(spark, trace_batch, tmp_path):
    batch = trace_batch()
    batch.emit("published", "m-1", 0, business_id="b-1")
    batch.emit("stored", "m-1", 1)
    batch.close()
    [original] = (tmp_path / "brokers").rglob("trace-*.arrows")
    copy = tmp_path / "brokers" / "copied" / original.name
    copy.parent.mkdir()
    copy.write_bytes(original.read_bytes())
    result = trace_index.run(spark, [str(tmp_path / "brokers")], str(tmp_path / "index"), **database(),
                             progress=quiet)
    assert (result["new_files"], result["new_events"]) == (2, 2)
    assert TracedMessage.objects.get().event_count == 2
    assert loaded_events() == 2


def test_an_index_built_again_over_loaded_tables_upserts_and_changes_nothing(spark, trace_batch, tmp_path):
    """A message new to the index is COPYed straight into the lookup tables; when it is there already (a run
    that failed after loading, or an index folder built again) the load upserts it instead."""
    inputs = [str(tmp_path / "brokers")]
    batch = trace_batch()
    batch.emit("published", "m-1", 0, business_id="b-1")
    batch.emit("stored", "m-1", 1)
    batch.emit("delivered", "m-1", 5, group="billing", consumer="c1", attempt=1)
    batch.close()
    loads = []

    def progress(stage, percent, **fields):
        if "upserted_rows" in fields:
            loads.append((fields["copied_rows"], fields["upserted_rows"]))

    trace_index.run(spark, inputs, str(tmp_path / "index"), **database(), progress=progress)
    before = snapshot()
    assert len(before) == 1 and loaded_events() == 3

    result = trace_index.run(spark, inputs, str(tmp_path / "another-index"), **database(), progress=progress)
    assert (result["new_files"], result["new_events"], result["messages"]) == (1, 3, 1)
    assert loads == [(1, 0), (0, 1)]  # the second load found the row already there: upserted
    assert snapshot() == before
    assert steps("m-1") == [("published", None, None), ("stored", None, None), ("delivered", "billing", 1)]


def test_a_message_whose_events_span_two_runs_is_merged_and_the_load_shows_progress(spark, trace_batch, tmp_path):
    inputs, output = [str(tmp_path / "brokers")], str(tmp_path / "index")
    seen = []

    def progress(stage, percent, **fields):
        seen.append((stage, percent, fields))

    first = trace_batch()
    first.emit("published", "m-1", 0, business_id="b-1")
    first.emit("stored", "m-1", 1)
    first.close()
    trace_index.run(spark, inputs, output, **database(), progress=progress)
    assert steps("m-1") == [("published", None, None), ("stored", None, None)]

    seen.clear()
    second = trace_batch()  # m-1's deliveries arrive in the next run's file, with a new message
    second.emit("delivered", "m-1", 5, group="billing", consumer="c1", attempt=1)
    second.emit("acked", "m-1", 6, group="billing", consumer="c1", attempt=1)
    second.emit("published", "m-2", 7, business_id="b-2")
    second.close()
    result = trace_index.run(spark, inputs, output, **database(), progress=progress)
    assert (result["new_events"], result["messages"]) == (3, 2)
    [loaded] = [fields for _, _, fields in seen if "upserted_rows" in fields]
    assert (loaded["copied_rows"], loaded["upserted_rows"]) == (1, 1)  # m-2 COPYed, m-1 upserted
    assert steps("m-1") == [("published", None, None), ("stored", None, None), ("delivered", "billing", 1),
                            ("acked", "billing", 1)]
    m1 = TracedMessage.objects.get(message_id="m-1")
    assert (m1.final_state, m1.event_count, m1.business_id) == ("acked", 4, "b-1")
    assert TracedMessage.objects.get(business_id="b-2").final_state == "published"

    # the run's progress: never back, each step's tasks counted to the end, then the commit at 100
    percents = [percent for _, percent, _ in seen]
    assert percents == sorted(percents) and percents[-1] == 100
    stages = [stage for stage, _, _ in seen]
    loaded_at = stages.index("summarizing, writing the index and loading PostgreSQL (2 of 2)")
    assert loaded_at < stages.index("committed")
    assert not any(stage.startswith("reading trace files") for stage in stages[loaded_at:]), stages


def partitions(folder) -> dict[tuple[str, str], list[str]]:
    """(date, topic) of each `date=/topic=` folder → the message ids in its Parquet files (read without Spark)."""
    found = {}
    for date_dir in sorted(folder.glob("date=*")):
        for topic_dir in sorted(date_dir.glob("topic=*")):
            found[(date_dir.name.removeprefix("date="), topic_dir.name.removeprefix("topic="))] = sorted(
                pq.read_table(topic_dir, columns=["message_id"]).column("message_id").to_pylist())
    return found


def summary_rows(folder) -> dict[str, dict]:
    return {row["message_id"]: row for part in folder.glob("date=*/topic=*") for row in pq.read_table(part).to_pylist()}


def file_bytes(folder) -> dict[str, bytes]:
    return {str(f.relative_to(folder)): f.read_bytes() for f in sorted(folder.rglob("*.parquet"))}


def test_the_index_is_partitioned_by_date_and_topic_and_a_batch_leaves_other_summaries_alone(spark, trace_batch,
                                                                                           tmp_path):
    inputs, output = [str(tmp_path / "brokers")], tmp_path / "index"
    run = lambda: trace_index.run(spark, inputs, str(output), **database(), progress=quiet)  # noqa: E731
    day = 86_400_000  # ms; T0 is 2026-01-01T00:00:00Z

    first = trace_batch()
    first.emit("published", "m-a", 0)
    first.emit("stored", "m-a", 1)
    first.emit("delivered", "m-a", 5, group="billing", consumer="c1", attempt=1)
    first.emit("published", "m-b", 10, topic="payments")
    first.emit("stored", "m-b", 11, topic="payments")
    # m-c starts a millisecond before midnight and ends after it: its row belongs to the day of its first event
    first.emit("published", "m-c", day - 1)
    first.emit("stored", "m-c", day - 0.5)
    first.emit("delivered", "m-c", day + 5, group="billing", consumer="c1", attempt=1)
    first.emit("acked", "m-c", day + 6, group="billing", consumer="c1", attempt=1)
    first.close()
    run()

    assert partitions(output / "messages") == {
        ("2026-01-01", "orders"): ["m-a", "m-c"], ("2026-01-01", "payments"): ["m-b"]}
    rows_before, payments_before = summary_rows(output / "messages"), file_bytes(output / "messages" / "date=2026-01-01"
                                                                                  / "topic=payments")
    db_before = list(TracedMessage.objects.filter(message_id__in=["m-b", "m-c"]).order_by("message_id").values())

    second = trace_batch()  # m-a goes on; m-d is new, on the next day
    second.emit("acked", "m-a", 20, group="billing", consumer="c1", attempt=1)
    second.emit("published", "m-d", day + 100, topic="payments")
    second.close()
    run()

    assert partitions(output / "messages") == {
        ("2026-01-01", "orders"): ["m-a", "m-c"], ("2026-01-01", "payments"): ["m-b"],
        ("2026-01-02", "payments"): ["m-d"]}
    rows_after = summary_rows(output / "messages")
    assert (rows_before["m-a"]["final_state"], rows_after["m-a"]["final_state"]) == ("in_flight", "acked")
    assert rows_after["m-b"] == rows_before["m-b"] and rows_after["m-c"] == rows_before["m-c"]
    # the partition no new event touched is not even rewritten
    assert file_bytes(output / "messages" / "date=2026-01-01" / "topic=payments") == payments_before
    assert list(TracedMessage.objects.filter(message_id__in=["m-b", "m-c"]).order_by("message_id").values()) == db_before
