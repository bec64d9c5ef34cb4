"""Learning-curve PNG output."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from fgl_ray.results.plots import plot_learning_curves
from fgl_ray.results.writer import metric_rows

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _df() -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for r in range(1, 11):
        for domain in ("DE", "EN", "all"):
            rows += metric_rows(r, "server", domain, "test", {"accuracy": rng.random()})
        rows += metric_rows(r, "server", "all", "val", {"accuracy": rng.random()})
    return pd.DataFrame(rows).assign(run_id="run")


def test_learning_curves_png(tmp_path: Path) -> None:
    path = plot_learning_curves(_df(), tmp_path / "plots" / "curves.png")
    data = path.read_bytes()
    assert path == tmp_path / "plots" / "curves.png"
    assert len(data) > len(PNG_MAGIC) and data.startswith(PNG_MAGIC)


def test_learning_curves_without_validation(tmp_path: Path) -> None:
    df = _df()
    path = plot_learning_curves(df[df["split"] == "test"], tmp_path / "c.png", title="t")
    assert path.read_bytes().startswith(PNG_MAGIC)


def test_per_class_accuracy_and_its_plot(tmp_path: Path) -> None:
    from fgl_ray.results.plots import per_class_accuracy, plot_class_accuracy

    cm = np.array([[3, 1, 0], [0, 0, 0], [2, 2, 4]])
    accuracy = per_class_accuracy(cm)
    assert accuracy[0] == 3 / 4 and np.isnan(accuracy[1]) and accuracy[2] == 4 / 8
    counts = np.arange(25, 0, -1)
    many = np.linspace(1, 0, 25)
    path = plot_class_accuracy({"a": many, "b": many / 2}, counts, tmp_path / "class.png", bins=10)
    assert path.read_bytes().startswith(PNG_MAGIC)
    assert plot_class_accuracy({"m": accuracy}, [5, 1, 9], tmp_path / "three.png").read_bytes().startswith(PNG_MAGIC)


def _drawn(monkeypatch):
    """The figures the plot functions save, captured as they are saved."""
    from matplotlib.figure import Figure

    figures = []
    original = Figure.savefig
    monkeypatch.setattr(Figure, "savefig", lambda fig, *a, **k: (figures.append(fig), original(fig, *a, **k))[1])
    return figures


def test_class_accuracy_bands_are_labelled_head_medium_tail(tmp_path: Path, monkeypatch) -> None:
    from fgl_ray.results.plots import plot_class_accuracy

    figures = _drawn(monkeypatch)
    plot_class_accuracy({"a": np.linspace(1, 0, 9)}, np.arange(9, 0, -1), tmp_path / "class.png")
    texts = [text.get_text() for ax in figures[0].axes for text in ax.texts]
    assert texts == ["head", "medium", "tail"]


def test_the_comparison_figure_draws_each_runs_domain_average(tmp_path: Path, monkeypatch) -> None:
    from fgl_ray.results.plots import plot_comparison
    from fgl_ray.results.summary import AVG_KEY, TEST_SPLIT, round_tables, server_rows

    figures = _drawn(monkeypatch)
    runs = {"fedavg": _df(), "local": _df().assign(value=lambda d: d.value / 2)}
    path = plot_comparison(runs, tmp_path / "cmp.png")
    assert path.read_bytes().startswith(PNG_MAGIC)
    lines = figures[0].axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["fedavg", "local"]
    expected = round_tables(server_rows(runs["local"]), TEST_SPLIT)["accuracy"][AVG_KEY]
    np.testing.assert_allclose(lines[1].get_ydata(), expected.to_numpy())
