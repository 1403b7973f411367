"""Read trace files (docs/trace-events.md) in the executors, one task per file, with pyarrow.

A file's records become its events there (broker_core.tracing.schema, the module the brokers' writer
uses): no event passes through a Spark row on the way to the summaries (`file_buckets`). `read_events`
gives them as rows of EVENT_SCHEMA, for the transforms' tests and the bench's reference.
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from broker_core.tracing.schema import event_schema
from broker_core.tracing.schema import read_events as read_file_events
from spark_jobs.trace_arrow import clean_table
from spark_jobs.trace_transforms import BLOB_DDL, bucket_blobs

EVENT_SCHEMA = from_arrow_schema(event_schema())


def read_events(spark: SparkSession, files: list[str]) -> DataFrame:
    """The events of trace files (EVENT_SCHEMA)."""

    def read(batches):
        for batch in batches:
            for path in batch.column(0).to_pylist():
                yield from read_file_events(path).to_batches(max_chunksize=65536)

    return _files_frame(spark, files).mapInArrow(read, EVENT_SCHEMA)


def file_buckets(spark: SparkSession, files: list[str], buckets: int, read_files=None) -> DataFrame:
    """The clean events of `files` as bucket blobs (trace_transforms.BLOB_DDL), not yet shuffled: one task per
    file reads it, cleans it (trace_arrow.clean_table) and cuts it into buckets by message id. `read_files`:
    an accumulator counting the files read (progress)."""

    def read(batches):
        for batch in batches:
            for path in batch.column(0).to_pylist():
                yield from bucket_blobs(clean_table(read_file_events(path)), buckets)
                if read_files is not None:
                    read_files.add(1)

    return _files_frame(spark, files).mapInArrow(read, BLOB_DDL)


def _files_frame(spark: SparkSession, files: list[str]) -> DataFrame:
    """A DataFrame of the paths, one partition (one task) per file."""
    return spark.createDataFrame([(f,) for f in files], "path string").repartition(max(1, len(files)))
