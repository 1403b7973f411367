"""Read trace files (docs/trace-events.md) into a DataFrame of EVENT_SCHEMA.

Parquet trace files (what brokers write) are read with pyarrow in the executors, one task per file:
a file of format 2 (a row per record, its messages' values as lists) becomes its events there
(broker_core.trace_records, the module the brokers' writer uses; its files of format 1 are read as
they are). JSON-lines files (older brokers) are still read, by one of two readers that give the same
rows: Spark's own JSON source, or pyarrow's C++ JSON reader running in the executors (one task per
file, the default: parsing JSON was most of an index build's time).
"""

from __future__ import annotations

from pyspark.sql import DataFrame, SparkSession

from spark_jobs.trace_schema import EVENT_SCHEMA

READERS = ("arrow", "spark")


def read_events(spark: SparkSession, files: list[str], reader: str = "arrow") -> DataFrame:
    """The events of `files`: `*.parquet` with pyarrow (either format), the others as JSON lines."""
    parquet = [f for f in files if f.endswith(".parquet")]
    jsonl = [f for f in files if not f.endswith(".parquet")]
    frames = []
    if parquet:
        frames.append(_files_frame(spark, parquet).mapInArrow(_arrow_reader(), EVENT_SCHEMA))
    if jsonl or not parquet:
        frames.append(read_jsonl(spark, jsonl, reader))
    return frames[0] if len(frames) == 1 else frames[0].unionByName(frames[1])


def file_buckets(spark: SparkSession, files: list[str], count: int) -> DataFrame:
    """The clean events of `files` as bucket blobs (trace_transforms.BLOB_DDL), not yet shuffled: one task per
    file reads it with pyarrow (Parquet, or JSON lines with the lenient fallback), cleans it
    (trace_arrow.clean_table) and cuts it into buckets by message id. No event passes through Spark rows."""
    from spark_jobs.trace_transforms import BLOB_DDL, bucket_blobs, bucket_labels

    labels = bucket_labels(count)
    schema = _arrow_schema()

    def read(batches):
        from spark_jobs.trace_arrow import clean_table

        for batch in batches:
            for path in batch.column(0).to_pylist():
                yield from bucket_blobs(clean_table(read_file(path, schema)), count, labels)

    return _files_frame(spark, files).mapInArrow(read, BLOB_DDL)


def read_file(path: str, schema):
    """One trace file as an Arrow table of `schema` (columns a file lacks are null)."""
    import pyarrow as pa

    if path.endswith(".parquet"):
        from broker_core.trace_records import read_parquet_events

        table = read_parquet_events(path)
        columns = [table[f.name].cast(f.type) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
                   for f in schema]
        return pa.Table.from_arrays(columns, schema=schema)
    import pyarrow.json as pj

    options = pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore", newlines_in_values=False)
    try:
        return pj.read_json(path, parse_options=options).select(schema.names)
    except pa.ArrowInvalid:  # a malformed line: read the file line by line and skip it
        return _read_lenient(path, schema)


def read_jsonl(spark: SparkSession, files: list[str], reader: str = "arrow") -> DataFrame:
    if reader == "spark":
        return spark.read.schema(EVENT_SCHEMA).option("mode", "DROPMALFORMED").json(files)
    if reader != "arrow":
        raise ValueError(f"unknown reader {reader!r}; expected one of {READERS}")
    return _files_frame(spark, files).mapInArrow(_arrow_reader(), EVENT_SCHEMA)


def _files_frame(spark: SparkSession, files: list[str]) -> DataFrame:
    """A DataFrame of the paths, one partition (one task) per file."""
    return spark.createDataFrame([(f,) for f in files], "path string").repartition(max(1, len(files)))


def _arrow_schema():
    import pyarrow as pa

    kinds = {"long": pa.int64(), "integer": pa.int32(), "string": pa.string()}
    return pa.schema([pa.field(f.name, kinds[f.dataType.typeName()]) for f in EVENT_SCHEMA])


def _arrow_reader():
    schema = _arrow_schema()

    def read(batches):
        for batch in batches:
            for path in batch.column(0).to_pylist():
                yield from read_file(path, schema).to_batches(max_chunksize=65536)

    return read


def _read_lenient(path: str, schema):
    import json

    import pyarrow as pa

    rows = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict):
                rows.append({name: doc.get(name) for name in schema.names})
    try:
        return pa.Table.from_pylist(rows, schema=schema)
    except (pa.ArrowInvalid, pa.ArrowTypeError):  # a field of the wrong type: keep the rows that fit
        good = []
        for row in rows:
            try:
                pa.Table.from_pylist([row], schema=schema)
                good.append(row)
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass
        return pa.Table.from_pylist(good, schema=schema)
