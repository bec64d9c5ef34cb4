"""Run outputs: the long-format metrics table, manifest, summary, plots and text tables."""

from fgl_ray.results.manifest import git_revision, package_versions, record_resume, write_manifest
from fgl_ray.results.plots import (per_class_accuracy, plot_class_accuracy, plot_comparison, plot_learning_curves,
                                  plot_update_diagnostics)
from fgl_ray.results.summary import round_tables, server_rows, summarize, write_summary
from fgl_ray.results.table import comparison_table, pooled_table
from fgl_ray.results.writer import (
    ALL_DOMAINS,
    METRIC_COLUMNS,
    METRIC_SCHEMA,
    SERVER_ID,
    MetricsWriter,
    metric_rows,
    read_metrics,
)

__all__ = [
    "ALL_DOMAINS",
    "METRIC_COLUMNS",
    "METRIC_SCHEMA",
    "SERVER_ID",
    "MetricsWriter",
    "comparison_table",
    "pooled_table",
    "git_revision",
    "metric_rows",
    "package_versions",
    "per_class_accuracy",
    "plot_class_accuracy",
    "plot_comparison",
    "plot_learning_curves",
    "plot_update_diagnostics",
    "read_metrics",
    "round_tables",
    "server_rows",
    "summarize",
    "record_resume",
    "write_manifest",
    "write_summary",
]
