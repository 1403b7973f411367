"""Trace events: the broker's record of every step of every message (docs/tracing.md, docs/trace-events.md).

    sink      the interface the broker calls (TraceSink) and the sink that records nothing; no pyarrow
    schema    the file format, shared with the index job (spark_jobs imports only this module of broker_core)
    records   the broker's side: records of publish batches, delivery and ack frames (msgpack to ship), and
              their decoding into Arrow record batches (in the trace process)
    columns   a publish batch's columns, taken from the message arrays (compiled: _parts.pyx, Cython)
    values    Run and Joined: a column of values held as one
    writer    rolling trace files: Arrow IPC streams, zstd-compressed (the one format)
    process   the sink that ships records (msgpack, through a pipe) to a child process running the writer
"""
