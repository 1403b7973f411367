"""Spark jobs of Switchyard. `trace_index` builds the message tracing index from the brokers' trace files.

Layout: `session` starts a SparkSession for a master URL; `trace_schema` is the event schema;
`trace_transforms` holds pure DataFrame → DataFrame steps; `index_store` reads and commits the
Parquet index and its checkpoint; `pg_load` loads the lookup tables into PostgreSQL;
`trace_index` only wires them. Nothing here imports Django.
"""
