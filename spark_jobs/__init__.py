"""Spark jobs of Switchyard. `trace_index` builds the message tracing index from the brokers' trace files.

Layout: `session` starts a SparkSession for a master URL; `trace_schema` is the event schema;
`trace_arrow` holds the pure per-partition steps on Arrow tables (clean, cut into buckets by message,
summarize); `trace_transforms` gives them as DataFrame → DataFrame steps and does the one shuffle;
`trace_read` reads trace files (in the executors); `index_store` reads, writes and commits the
Parquet index and its checkpoint; `pg_load` loads the lookup tables into PostgreSQL;
`trace_index` only wires them. Nothing here imports Django.
"""
