"""The Parquet metrics dataset: schema, appends, crash safety."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from fgl_ray.results.writer import (
    METRIC_COLUMNS,
    METRIC_SCHEMA,
    METRICS_DIRNAME,
    MetricsWriter,
    metric_rows,
    read_metrics,
)


def _batch(round_: int) -> list[dict]:
    rows = metric_rows(round_, "server", "all", "test", {"accuracy": 0.5 + round_ / 100})
    for cid, domain in ((0, "DE"), (1, "EN")):
        rows += metric_rows(round_, cid, domain, "val", {"accuracy": cid / 10, "macro_f1": 0.25})
    return rows


def test_rows_from_several_writes_read_back_with_schema(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path, "run-a")
    written: list[dict] = []
    for round_ in range(1, 4):
        batch = _batch(round_)
        writer.write(batch)
        written += [{"run_id": "run-a", **row} for row in batch]
        df = read_metrics(tmp_path)  # readable after every write
        assert len(df) == len(written)
    table = pq.read_table(tmp_path / METRICS_DIRNAME)
    assert table.schema.equals(METRIC_SCHEMA)
    assert tuple(table.column_names) == METRIC_COLUMNS
    assert read_metrics(tmp_path).to_dict("records") == written
    assert len(pd.read_parquet(tmp_path / METRICS_DIRNAME)) == len(written)


def test_half_written_temp_part_does_not_break_reading(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path, "run-b")
    writer.write(_batch(1))
    part = writer.write(_batch(2))
    # A crash while writing part 3 leaves its temporary file truncated.
    crashed = part.with_name(".part-000003.parquet.tmp")
    crashed.write_bytes(part.read_bytes()[:40])
    df = read_metrics(tmp_path)
    assert len(df) == len(_batch(1)) + len(_batch(2))
    assert len(pq.read_table(tmp_path / METRICS_DIRNAME)) == len(df)


def test_new_writer_continues_part_numbering(tmp_path: Path) -> None:
    first = MetricsWriter(tmp_path, "run-c").write(_batch(1))
    second = MetricsWriter(tmp_path, "run-c").write(_batch(2))
    assert first is not None and second is not None and first != second
    assert sorted(read_metrics(tmp_path)["round"].unique()) == [1, 2]


def test_empty_dataset_and_empty_write(tmp_path: Path) -> None:
    writer = MetricsWriter(tmp_path, "run-d")
    assert writer.write([]) is None
    df = read_metrics(tmp_path)
    assert df.empty and tuple(df.columns) == METRIC_COLUMNS


def test_client_id_is_text_and_run_id_is_filled(tmp_path: Path) -> None:
    MetricsWriter(tmp_path, "run-e").write(metric_rows(4, 17, "EN", "test", {"accuracy": 1}))
    row = read_metrics(tmp_path).iloc[0]
    assert (row["run_id"], row["round"], row["client_id"], row["value"]) == ("run-e", 4, "17", 1.0)


@pytest.mark.parametrize(
    "row",
    [
        {"round": 1, "client_id": "0", "domain": "DE", "split": "test", "metric": "accuracy"},
        {**metric_rows(1, 0, "DE", "test", {"accuracy": 0.1})[0], "extra": 1},
        {**metric_rows(1, 0, "DE", "test", {"accuracy": 0.1})[0], "domain": None},
        {**metric_rows(1, 0, "DE", "test", {"accuracy": 0.1})[0], "run_id": "other"},
    ],
)
def test_bad_rows_are_rejected(tmp_path: Path, row: dict) -> None:
    writer = MetricsWriter(tmp_path, "run-f")
    with pytest.raises(ValueError):
        writer.write([row])
    assert not any((tmp_path / METRICS_DIRNAME).iterdir())


def test_missing_dataset_is_reported(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=METRICS_DIRNAME):
        read_metrics(tmp_path)
