"""Spark jobs of Switchyard. `trace_index` builds the message tracing index from the brokers' trace files.

Layout: `session` starts a SparkSession for a master URL; `trace_read` reads trace files in the executors
(through broker_core.tracing.schema, the file format the brokers write); `trace_arrow` holds the pure
per-partition steps on Arrow tables (clean, cut into buckets by message, summarize); `trace_transforms`
gives them as DataFrame → DataFrame steps and does the one shuffle; `index_store` writes and commits the
Parquet index and its checkpoint; `pg_load` makes the lookups servable in PostgreSQL (each summarizing task
loads its rows), with `pg_copy` building the rows in binary COPY format; `progress` counts the tasks done;
`password` reads the database password file; `trace_index` only wires them. Nothing here imports Django,
and of `broker_core` only the trace schema.
"""
