"""The trace event schema (docs/trace-events.md, format version 1), given up front so nothing is inferred."""

from pyspark.sql.types import IntegerType, LongType, StringType, StructField, StructType

EVENT_SCHEMA = StructType([
    StructField("v", IntegerType()),
    StructField("event_id", StringType()),
    StructField("ts_us", LongType()),
    StructField("event", StringType()),
    StructField("message_id", StringType()),
    StructField("topic", StringType()),
    StructField("message_type", StringType()),
    StructField("key", StringType()),
    StructField("business_id", StringType()),
    StructField("cluster", StringType()),
    StructField("broker", StringType()),
    StructField("app_id", StringType()),
    StructField("client_host", StringType()),
    StructField("group", StringType()),
    StructField("consumer", StringType()),
    StructField("attempt", IntegerType()),
    StructField("detail", StringType()),
    StructField("size", LongType()),
])

# Order of kinds recorded in the same microsecond: the order in which they happen to one message.
EVENT_RANK = {
    "published": 0, "prepared": 1, "stored": 2, "committed": 3, "rolled_back": 4, "delivered": 5,
    "nacked": 6, "timed_out": 7, "acked": 8, "dead_lettered": 9, "expired": 10, "redriven": 11,
}
FINAL_STATES = ("acked", "dead_lettered", "expired")
# What a message is as a whole: the worst state of its groups comes first.
STATE_PRECEDENCE = ("rolled_back", "dead_lettered", "expired", "retrying", "in_flight", "pending", "acked",
                    "prepared", "stored", "published")
