"""Trace events: the broker's record of every step of every message (docs/tracing.md, docs/trace-events.md).

    sink      the interface the broker calls (TraceSink) and the sink that records nothing; no pyarrow
    schema    the file format, shared with the index job (spark_jobs imports only this module of broker_core)
    records   the broker's side: records of publish batches, delivery and ack frames as Arrow record batches
    writer    rolling trace files: an Arrow stream while open, Parquet once closed
    process   the sink that ships record batches (Arrow IPC) to a child process running the writer
"""
