"""Heatmap cells and baseline outlines, per-round Tune reports, overlap counting (no Ray started)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from fgl_ray.config import load_config
from fgl_ray.tune.plots import beats_baseline, heatmap_matrix, plot_grid_heatmaps
from fgl_ray.tune.tables import max_overlap

XS, YS, FACET = [0.1, 0.5], [0.3, 0.7, 0.9], ["S1", "S3"]


def description(facets=True):
    axes = [{"path": "aggregator_options.rho", "values": XS}, {"path": "aggregator_options.beta", "values": YS}]
    points, index = [], 0
    for facet in (FACET if facets else [None]):
        extra = {"preset": facet} if facets else {}
        points.append({"id": f"baseline-{facet}", "axes": extra, "baseline": True})
        for x in XS:
            for y in YS:
                points.append({"id": f"p{index:03d}", "axes": {"aggregator_options.rho": x,
                                                                "aggregator_options.beta": y} | extra,
                               "baseline": False})
                index += 1
    if facets:
        axes.append({"path": "preset", "values": FACET})
    return {"name": "t", "axes": axes, "heatmap": ["aggregator_options.rho", "aggregator_options.beta"],
            "facets": ["preset"] if facets else [], "metric": {"name": "accuracy", "domain": "avg_over_domains"},
            "points": points}


def scores_for(desc, rng):
    return {p["id"]: float(rng.uniform(0.2, 0.8)) for p in desc["points"]}


def test_matrix_places_each_trial_in_its_cell_and_picks_its_facets_baseline():
    desc = description()
    scores = scores_for(desc, np.random.default_rng(0))
    for facet in FACET:
        matrix, xs, ys, baseline = heatmap_matrix(desc, scores, {"preset": facet})
        assert matrix.shape == (len(YS), len(XS)) and (xs, ys) == (XS, YS)
        assert baseline == scores[f"baseline-{facet}"]
        for p in desc["points"]:
            if not p["baseline"] and p["axes"]["preset"] == facet:
                cell = matrix[YS.index(p["axes"]["aggregator_options.beta"]), XS.index(p["axes"]["aggregator_options.rho"])]
                assert cell == scores[p["id"]]


def test_outlines_exactly_the_cells_above_the_baseline():
    matrix = np.array([[0.2, 0.5], [np.nan, 0.7]])
    better = beats_baseline(matrix, 0.5)
    assert better.tolist() == [[False, False], [False, True]]
    assert not beats_baseline(matrix, math.nan).any()


def test_one_heatmap_per_facet_value(tmp_path):
    desc = description()
    scores = scores_for(desc, np.random.default_rng(1))
    trials = pd.DataFrame({"trial_id": list(scores), "score": list(scores.values())})
    paths, notes = plot_grid_heatmaps(desc, trials, tmp_path)
    assert sorted(p.name for p in paths) == sorted(f"heatmap-preset={f}.png" for f in FACET)
    assert all(p.stat().st_size > 0 for p in paths) and not notes


def test_missing_scores_still_draw_and_one_axis_grids_are_skipped_with_a_note(tmp_path):
    desc = description(facets=False)
    trials = pd.DataFrame({"trial_id": [p["id"] for p in desc["points"]], "score": math.nan})
    paths, notes = plot_grid_heatmaps(desc, trials, tmp_path)
    assert [p.name for p in paths] == ["heatmap.png"] and "no trial has a score" in notes[0]
    single = desc | {"axes": desc["axes"][:1], "heatmap": None}
    paths, notes = plot_grid_heatmaps(single, trials, tmp_path / "single")
    assert paths == [] and "needs two" in notes[0]


def test_max_overlap_counts_concurrent_intervals():
    assert max_overlap([(0, 2), (1, 3), (2.5, 4)]) == 2
    assert max_overlap([(0, 1), (1, 2)]) == 1  # one ends as the next starts
    assert max_overlap([(0, 5), (1, 2), (1.5, 3)]) == 3
    assert max_overlap([]) == 0


def _rows(round_index, values):
    rows = []
    for split, per_domain in values.items():
        for domain, value in per_domain.items():
            rows.append({"round": round_index, "client_id": "server", "domain": domain, "split": split,
                         "metric": "accuracy", "value": value})
    rows.append({"round": round_index, "client_id": "0", "domain": "a", "split": "test", "metric": "accuracy",
                 "value": 0.0})  # client rows are not reported
    return rows


def test_round_reporter_reports_pooled_average_and_running_last_k():
    from fgl_ray.tune.runner import RoundReporter

    config = load_config({"last_k": 2})
    reports = []
    reporter = RoundReporter(config, {"name": "accuracy", "domain": "avg_over_domains"})
    rng = np.random.default_rng(2)
    history = []
    for t in range(4):
        test = {"a": rng.random(), "b": rng.random(), "all": rng.random()}
        reports.append(reporter(SimpleNamespace(round=t, failures=[]),
                                _rows(t, {"val": {"a": 0.1, "all": 0.2}, "test": test})))
        history.append((test["a"] + test["b"]) / 2)
        last = reports[-1]
        assert last["round"] == t and last["test/accuracy/all"] == test["all"]
        assert last["test/accuracy/avg"] == pytest.approx(history[-1])
        window = history[-config.last_k:]
        assert last["lastk/accuracy/avg/mean"] == pytest.approx(np.mean(window))
        assert last["lastk/accuracy/avg/std"] == pytest.approx(np.std(window))
        assert last["score"] == pytest.approx(np.mean(window))
        assert last["val/accuracy/avg"] == 0.1


def test_round_reporter_leaves_out_undefined_values():
    from fgl_ray.tune.runner import RoundReporter

    reporter = RoundReporter(load_config({}), {"name": "accuracy", "domain": "avg_over_domains"})
    reports = [reporter(SimpleNamespace(round=0, failures=[]), _rows(0, {"test": {"all": 0.5, "a": math.nan}}))]
    assert "test/accuracy/avg" not in reports[0] and reports[0]["test/accuracy/all"] == 0.5
    assert all(not (isinstance(v, float) and math.isnan(v)) for v in reports[0].values())
