"""One place that starts a SparkSession, for local[*] or a cluster's master URL."""

from __future__ import annotations

import logging
import os
import sys

from pyspark.sql import SparkSession


def spark_session(
    master: str = "local[*]",
    app_name: str = "switchyard",
    *,
    shuffle_partitions: int | None = None,
    driver_memory: str = "1g",
    jars: list[str] | None = None,
    conf: dict[str, str] | None = None,
):
    """Start (or return the running) session. Settings that matter on a small shared machine are fixed here."""
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    # Python workers run this interpreter (its pyarrow), unless the deployment chose another
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)

    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.session.timeZone", "UTC")
        # topic names like "2024" must stay strings when read back from partition folders
        .config("spark.sql.sources.partitionColumnTypeInference.enabled", "false")
        # partitioned writes sort each task's rows by (date, topic) and keep one writer open (Spark's
        # default); concurrent writers (one per topic, each buffering every nested timeline column)
        # measured slower: 11.5 s vs 7.5 s for the summaries of 1M events
        .config("spark.sql.maxConcurrentOutputFileWriters", "0")
        .config("spark.sql.parquet.compression.codec", "snappy")
        # the trace summaries aggregate strings (sort-based aggregation): generated code for it is
        # 15-30% faster than the interpreted default on the index bench
        .config("spark.sql.codegen.aggregate.sortAggregate.withKeys.enabled", "true")
        # the index hands whole partitions to Arrow: fewer, larger batches cost less per event
        .config("spark.sql.execution.arrow.maxRecordsPerBatch", "65536")
    )
    if master.startswith("local"):
        builder = builder.config("spark.driver.host", "127.0.0.1").config("spark.driver.bindAddress", "127.0.0.1")
    if shuffle_partitions:
        builder = builder.config("spark.sql.shuffle.partitions", str(shuffle_partitions))
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    logging.getLogger("py4j").setLevel(logging.WARNING)  # its per-connection INFO lines are noise
    spark.sparkContext.setLogLevel("WARN")
    return spark
