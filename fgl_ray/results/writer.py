"""Long-format metrics table, appended to a Parquet directory dataset as a run goes.

Every row is one number: (run_id, round, client_id, domain, split, metric, value). Each
:meth:`MetricsWriter.write` call adds one part file to ``run_dir/metrics.parquet/``, written
under a dot-prefixed temporary name and renamed into place, so a killed run keeps every part
already written and readers (which skip dot-prefixed files) never see a partial one.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

SERVER_ID = "server"
ALL_DOMAINS = "all"
METRICS_DIRNAME = "metrics.parquet"

METRIC_SCHEMA = pa.schema(
    [
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("round", pa.int64(), nullable=False),
        pa.field("client_id", pa.string(), nullable=False),
        pa.field("domain", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("metric", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),
    ]
)
METRIC_COLUMNS: tuple[str, ...] = tuple(METRIC_SCHEMA.names)

_PART_RE = re.compile(r"^part-(\d+)\.parquet$")


def metric_rows(
    round: int,
    client_id: str | int,
    domain: str,
    split: str,
    scores: Mapping[str, float],
) -> list[dict[str, Any]]:
    """Turns one score dict into long-format rows (without run_id; the writer adds it).

    Args:
        round: the federation round.
        client_id: the client id, or ``SERVER_ID`` for aggregate rows.
        domain: the domain name, or ``ALL_DOMAINS`` for pooled rows.
        split: ``train``, ``val``, ``test``, ...
        scores: metric name -> value, e.g. from ``scores_from_confusion``.

    Returns:
        One row dict per metric.
    """
    return [
        {
            "round": round,
            "client_id": str(client_id),
            "domain": domain,
            "split": split,
            "metric": metric,
            "value": float(value),
        }
        for metric, value in scores.items()
    ]


class MetricsWriter:
    """Appends metric rows of one run to ``run_dir/metrics.parquet/part-NNNNNN.parquet``.

    Args:
        run_dir: the run's output folder (created if missing).
        run_id: stored in every row.
    """

    def __init__(self, run_dir: str | os.PathLike[str], run_id: str) -> None:
        self.run_id = run_id
        self.path = Path(run_dir) / METRICS_DIRNAME
        self.path.mkdir(parents=True, exist_ok=True)
        existing = [_PART_RE.match(p.name) for p in self.path.iterdir()]
        self._next_part = max((int(m.group(1)) for m in existing if m), default=0) + 1

    def write(self, rows: Iterable[Mapping[str, Any]]) -> Path | None:
        """Writes the rows as one new part file, atomically and fsync'ed.

        Args:
            rows: dicts with the keys of ``METRIC_COLUMNS``; ``run_id`` may be omitted (the
                writer's is used) and ``client_id`` may be an int (stored as text).

        Returns:
            The part file written, or None when ``rows`` is empty.
        """
        table = self._to_table(list(rows))
        if table.num_rows == 0:
            return None
        final = self.path / f"part-{self._next_part:06d}.parquet"
        tmp = self.path / f".{final.name}.tmp"
        with open(tmp, "wb") as sink:
            pq.write_table(table, sink)
            sink.flush()
            os.fsync(sink.fileno())
        os.replace(tmp, final)
        self._next_part += 1
        return final

    @property
    def parts_written(self) -> int:
        """How many part files the run has so far."""
        return self._next_part - 1

    def truncate(self, parts: int) -> None:
        """Deletes every part after the first ``parts`` (rows of rounds a resumed run repeats)."""
        for path in self.path.iterdir():
            if (match := _PART_RE.match(path.name)) and int(match.group(1)) > parts:
                path.unlink()
        self._next_part = parts + 1

    def _to_table(self, rows: list[Mapping[str, Any]]) -> pa.Table:
        columns: dict[str, list[Any]] = {name: [] for name in METRIC_COLUMNS}
        for i, row in enumerate(rows):
            row = {"run_id": self.run_id, **row}
            if set(row) != set(METRIC_COLUMNS) or any(v is None for v in row.values()):
                raise ValueError(
                    f"metric row {i} must have non-null keys {list(METRIC_COLUMNS)}, got {row}"
                )
            if row["run_id"] != self.run_id:
                raise ValueError(
                    f"row {i} has run_id {row['run_id']!r}, the writer has {self.run_id!r}"
                )
            row["client_id"] = str(row["client_id"])
            for name in METRIC_COLUMNS:
                columns[name].append(row[name])
        return pa.table(columns, schema=METRIC_SCHEMA)


def read_metrics(run_dir: str | os.PathLike[str]) -> pd.DataFrame:
    """Reads every complete part file of a run (also while the run is still writing).

    Args:
        run_dir: the run's output folder.

    Returns:
        A DataFrame with the columns of ``METRIC_COLUMNS`` in the order written.
    """
    path = Path(run_dir) / METRICS_DIRNAME
    if not path.is_dir():
        raise FileNotFoundError(f"no metrics dataset at {path}")
    return pq.read_table(path, schema=METRIC_SCHEMA).to_pandas()
