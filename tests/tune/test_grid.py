"""Grid YAML -> validated points: lists, ranges, dotted paths, baselines, errors before Ray."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import yaml

from fgl_ray import cli
from fgl_ray.tune.grid import GridError, build_grid, load_grid

REPO = Path(__file__).resolve().parents[2]
SYNTHETIC = {"num_domains": 2, "nodes_per_domain": 40, "num_features": 8, "num_classes": 3}
BASE = {"dataset": "synthetic", "synthetic": SYNTHETIC, "aggregator": "fedia", "hidden": 8, "rounds": 2}


def grid(**document):
    return build_grid({"base": BASE} | document)


def test_lists_and_ranges_expand_to_the_cartesian_product():
    start, stop, step = 0.1, 0.9, 0.2
    g = grid(axes={"aggregator_options.rho": [0.2, 0.6],
                   "aggregator_options.beta": {"start": start, "stop": stop, "step": step}},
             baseline=None)
    betas = g.axes[1].values
    assert betas[0] == start and betas[-1] <= stop + 1e-12 and betas[-1] + step > stop
    assert all(math.isclose(b - a, step) for a, b in zip(betas, betas[1:]))
    assert all(len(repr(b)) <= 4 for b in betas)  # tidy decimals, no 0.30000000000000004
    assert len(g.points) == len(g.axes[0].values) * len(betas)
    combos = {(p.config.aggregator_options["rho"], p.config.aggregator_options["beta"]) for p in g.points}
    assert combos == {(r, b) for r in g.axes[0].values for b in betas}


def test_num_range_and_values_form():
    g = grid(axes={"lr": {"start": 0.01, "stop": 0.05, "num": 3}, "local_epochs": {"values": [1, 2]}}, baseline=None)
    lrs = g.axes[0].values
    assert len(lrs) == 3 and lrs[0] == 0.01 and lrs[-1] == 0.05
    assert {p.config.local_epochs for p in g.points} == {1, 2}
    assert all(isinstance(p.config.local_epochs, int) for p in g.points)


def test_integer_range_stays_integer():
    g = grid(axes={"local_epochs": {"start": 1, "stop": 3, "step": 1}}, baseline=None)
    assert g.axes[0].values == (1, 2, 3) and all(isinstance(v, int) for v in g.axes[0].values)


def test_dotted_paths_merge_into_nested_option_dicts():
    g = build_grid({"base": BASE | {"aggregator_options": {"mask_scope": "global"}},
                    "axes": {"aggregator_options.rho": [0.3], "synthetic.num_domains": [2, 3]}, "baseline": None})
    for point in g.points:
        assert point.config.aggregator_options == {"mask_scope": "global", "rho": 0.3}
        assert point.config.synthetic == SYNTHETIC | {"num_domains": point.axes["synthetic.num_domains"]}


def test_bad_value_fails_naming_its_point_and_the_config_error():
    with pytest.raises(GridError) as caught:
        grid(axes={"aggregator_options.rho": [0.5, 1.5], "aggregator_options.beta": [0.1, 0.2]})
    message = str(caught.value)
    bad = [line for line in message.splitlines() if line.startswith("grid point")]
    assert len(bad) == 2 and all("rho=1.5" in line for line in bad)
    assert "less than or equal to 1" in message and "rho=0.5" not in message


@pytest.mark.parametrize("axes, expected", [
    ({"nope": [1]}, "unknown config field 'nope'"),
    ({"hidden.width": [1]}, "not an option mapping"),
    ({"lr": 0.1}, "belongs in base"),
    ({"lr": [0.1, 0.1]}, "repeats a value"),
    ({"lr": {"start": 0.2, "stop": 0.1, "step": 0.1}}, "stop >= start"),
    ({"lr": {"start": 0.1, "stop": 0.2}}, "exactly one of step or num"),
    ({"output_dir": ["a", "b"]}, "set by the grid runner"),
    ({}, "axes is empty"),
])
def test_malformed_axes_are_named(axes, expected):
    with pytest.raises(GridError, match=expected):
        grid(axes=axes)


def test_unknown_top_level_key_lists_valid_keys():
    with pytest.raises(GridError, match="unknown key; valid keys: .*axes"):
        grid(axes={"lr": [0.1]}, axis={"lr": [0.2]})


def test_default_baseline_is_the_base_with_the_mean_aggregator():
    g = grid(axes={"aggregator_options.rho": [0.3, 0.5], "aggregator_options.beta": [0.1]})
    (baseline,) = g.baselines
    assert g.points[0] is baseline and baseline.config.aggregator == "mean"
    assert baseline.config.aggregator_options == {} and baseline.axes == {}
    assert baseline.config.rounds == BASE["rounds"]


def test_baseline_runs_once_per_facet_value():
    g = grid(axes={"aggregator_options.rho": [0.3], "aggregator_options.beta": [0.1],
                   "synthetic.num_domains": [2, 3]}, baseline={"aggregator": "mean"})
    assert g.facets == ["synthetic.num_domains"]
    assert sorted(b.config.synthetic["num_domains"] for b in g.baselines) == [2, 3]
    assert all(set(b.axes) == {"synthetic.num_domains"} for b in g.baselines)


def test_heatmap_axes_must_be_axes():
    with pytest.raises(GridError, match="heatmap.x 'lr' is not an axis"):
        grid(axes={"aggregator_options.rho": [0.3], "aggregator_options.beta": [0.1]}, heatmap={"x": "lr", "y": "seed"})


def test_metric_domain_is_checked():
    with pytest.raises(GridError, match="metric.domain 'XX'"):
        grid(axes={"lr": [0.1]}, metric={"name": "accuracy", "domain": "XX"})
    assert grid(axes={"lr": [0.1]}, metric="macro_f1").metric.domain == "avg_over_domains"


def test_set_values_and_limit_apply_to_every_point():
    g = build_grid({"base": BASE, "axes": {"aggregator_options.rho": [0.1, 0.3, 0.5]}}, set_values={"rounds": 1},
                   limit=2)
    assert g.axes[0].values == (0.1, 0.3)
    assert {p.config.rounds for p in g.points} == {1}


def test_digest_changes_with_the_config_only():
    a = grid(axes={"lr": [0.1, 0.2]})
    b = grid(axes={"lr": [0.1, 0.3]})
    assert a.points[1].digest() == b.points[1].digest()
    assert a.points[2].digest() != b.points[2].digest()


def test_shipped_grids_validate(shared_datasets, monkeypatch):
    monkeypatch.setenv("FGL_DATA_DIR", str(shared_datasets))
    fedia = load_grid(REPO / "tune_configs" / "fedia_rho_beta.yaml")
    assert len(fedia.trials) == 5 * 5 * 2 and len(fedia.baselines) == 2
    assert {p.config.partition for p in fedia.baselines} == {"twitch-S1", "twitch-S3"}
    assert {p.config.model for p in fedia.points} == {"pmlp_gcn"}
    fedmgs = load_grid(REPO / "tune_configs" / "fedmgs_lambda.yaml")
    assert len(fedmgs.trials) == 25 and {p.config.model for p in fedmgs.points} == {"mm_gnn"}
    gcfl = load_grid(REPO / "tune_configs" / "gcfl_eps.yaml")
    assert len(gcfl.trials) == 16 and [p.config.algorithm for p in gcfl.baselines] == ["fedavg"]
    assert {(p.config.model, p.config.resolved_task()) for p in gcfl.points} == {("gin", "graph-classification")}


def test_smoke_grid_is_small():
    smoke = load_grid(REPO / "tune_configs" / "smoke.yaml")
    assert [len(a.values) for a in smoke.axes] == [2, 2] and smoke.heatmap is not None
    assert all(p.config.rounds <= 3 and p.config.hidden <= 8 for p in smoke.points)


def test_cli_bad_point_fails_before_ray_starts(tmp_path, monkeypatch, capsys):
    import fgl_ray.tune.runner as runner

    monkeypatch.setattr(runner, "run_grid", lambda *a, **k: pytest.fail("Ray must not start on a bad grid"))
    monkeypatch.setattr(runner.ray, "init", lambda *a, **k: pytest.fail("Ray must not start on a bad grid"))
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump({"base": BASE, "axes": {"aggregator_options.rho": [0.5, 2.0]}}))
    assert cli.main(["tune", str(path), "--output", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "grid point p001" in err and "rho=2" in err
    assert not (tmp_path / "out").exists()


def test_cli_dry_run_lists_points(capsys):
    assert cli.main(["tune", str(REPO / "tune_configs" / "smoke.yaml"), "--dry-run", "--set", "rounds=2"]) == 0
    out = capsys.readouterr().out
    assert "baseline" in out and out.count("rho=") == 4


@pytest.mark.parametrize("field, value", [("features", "svd"), ("split_mode", "stratified"), ("feature_dim", 64),
                                          ("imbalance_ratio", 10)])
def test_every_field_that_shapes_the_partitions_is_in_the_data_key(field, value):
    from fgl_ray.config import load_config
    from fgl_ray.tune.grid import data_key

    base = load_config({"dataset": "twitch", "partition": "twitch-S1"})
    assert data_key(base) != data_key(base.with_overrides(**{field: value}))


def test_missing_modalities_are_in_the_data_key():
    from fgl_ray.config import load_config
    from fgl_ray.tune.grid import data_key

    base = load_config({"dataset": "synthetic-mm", "missing": "node:0.3"})
    assert data_key(base) != data_key(base.with_overrides(missing="node:0.5"))


def test_max_graphs_is_in_the_data_key():
    from fgl_ray.config import load_config
    from fgl_ray.tune.grid import data_key

    base = load_config({"dataset": "tu-proteins"})
    assert data_key(base) != data_key(base.with_overrides(max_graphs=150))


def test_a_range_or_grid_too_large_to_run_is_refused_before_it_is_expanded():
    from fgl_ray.tune.grid import MAX_AXIS_VALUES, MAX_POINTS

    with pytest.raises(GridError, match=rf"gives 1,000,000,00\d values; at most {MAX_AXIS_VALUES}"):
        grid(axes={"aggregator_options.rho": {"start": 0, "stop": 1, "step": 1e-9}})
    with pytest.raises(GridError, match="num must be in"):
        grid(axes={"aggregator_options.rho": {"start": 0, "stop": 1, "num": MAX_AXIS_VALUES + 1}})
    side = int(MAX_POINTS ** 0.5) + 1
    with pytest.raises(GridError, match=f"make {side * side:,} grid points"):
        grid(axes={"lr": {"start": 0.001, "stop": 0.001 * side, "num": side},
                   "aggregator_options.rho": {"start": 0.0, "stop": 1.0, "num": side}})


def test_set_cannot_fix_a_swept_path():
    with pytest.raises(GridError, match="is an axis of this grid"):
        build_grid({"base": BASE, "axes": {"aggregator_options.rho": [0.1, 0.3]}},
                   set_values={"aggregator_options.rho": 0.9})
    merged = build_grid({"base": BASE, "axes": {"aggregator_options.rho": [0.1, 0.3]}},
                        set_values={"aggregator_options": {"beta": 0.2}})            # the mapping around it may change
    assert {p.config.aggregator_options["beta"] for p in merged.points if not p.baseline} == {0.2}


def test_limit_keeps_a_long_range_to_its_first_values():
    g = build_grid({"base": BASE, "axes": {"aggregator_options.rho": {"start": 0.1, "stop": 1, "step": 1e-7}}}, limit=2)
    assert [p.axes["aggregator_options.rho"] for p in g.points if not p.baseline] == [0.1, 0.1000001]
