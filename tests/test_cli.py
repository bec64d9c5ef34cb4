import pytest

from fgl_ray import cli
from fgl_ray.algorithms import ALGORITHMS


def test_list_names_every_registry(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    for name in ALGORITHMS.names() + ["mean", "fedia", "gcn", "pmlp_gcn", "louvain", "twitch-S3"]:
        assert name in out


@pytest.mark.parametrize("name", ALGORITHMS.names() + ["fedia", "trimmed_mean"])
def test_list_with_a_name_shows_every_option_with_its_default(capsys, name):
    from fgl_ray.aggregators import AGGREGATORS

    assert cli.main(["list", name]) == 0
    out = capsys.readouterr().out
    cls = ALGORITHMS.get(name) if name in ALGORITHMS.names() else AGGREGATORS.get(name)
    for field, info in cls.Options.model_fields.items():
        assert f"    {field}: " in out and f" = {info.default!r}" in out
    assert ("options: none" in out) is not cls.Options.model_fields


def test_list_with_a_model_shows_its_options_and_an_unknown_name_the_closest(capsys):
    from fgl_ray.models.base import model_options

    assert cli.main(["list", "sage"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("model sage: ") and model_options("sage") == ["aggregation"]
    assert "aggregation: 'csr' | 'scatter' = 'csr'" in out
    assert cli.main(["list", "fedprx"]) == 2
    assert "did you mean 'fedprox'?" in capsys.readouterr().err


def test_bad_input_fails_before_any_ray_process(monkeypatch, capsys):
    monkeypatch.setattr(cli, "_simulator", lambda *args: pytest.fail("Ray must not start on bad input"))
    assert cli.main(["run", "--algorithm", "fedfoo"]) == 2
    err = capsys.readouterr().err
    assert "unknown algorithm 'fedfoo'" in err and "fedavg" in err


def test_run_compares_fedavg_and_local_by_default(tmp_path, capsys):
    code = cli.main(["run", "--backend", "local", "--rounds", "2", "--no-progress", "--output-dir", str(tmp_path),
                     "--synthetic", "{nodes_per_domain: 60, num_features: 8}", "--hidden", "8"])
    assert code == 0
    out = capsys.readouterr().out
    assert "fedavg+mean" in out and "local+mean" in out and "AVG" in out
    assert "balanced_accuracy" in out and "macro_f1" in out                    # the pooled table
    assert "fedavg+mean: local work" in out and "node batching full" in out
    folders = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    (figure,) = tmp_path.glob("*.png")                                          # one comparison figure
    assert len(folders) == 2 and figure.name == f"comparison-{folders[0]}.png"
    assert f"domain-average test accuracy: {figure}" in out


def test_a_config_files_algorithm_and_run_name_are_what_runs(tmp_path, capsys):
    """`--config exp.yaml` naming an algorithm runs that algorithm alone, not the default comparison."""
    (tmp_path / "exp.yaml").write_text("algorithm: local\nrun_name: mine\nrounds: 1\nhidden: 8\n"
                                       "synthetic: {nodes_per_domain: 60, num_features: 8}\n")
    code = cli.main(["run", "--config", str(tmp_path / "exp.yaml"), "--backend", "local", "--no-progress",
                     "--output-dir", str(tmp_path / "out")])
    assert code == 0
    out = capsys.readouterr().out
    assert "local+mean" in out and "fedavg+mean" not in out
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["mine"]
    code = cli.main(["run", "--config", str(tmp_path / "exp.yaml"), "--backend", "local", "--no-progress",
                     "--output-dir", str(tmp_path / "cmp"), "--compare", "fedavg,local"])
    assert code == 0                                       # --compare still overrides the file
    assert sorted(p.name for p in (tmp_path / "cmp").iterdir() if p.is_dir()) == ["mine-fedavg", "mine-local"]
    (tmp_path / "local.yaml").write_text("backend: local\n")
    assert cli.main(["run", "--config", str(tmp_path / "local.yaml"), "--address", "127.0.0.1:1"]) == 2
    assert "--backend local runs in this process" in capsys.readouterr().err


def test_a_partition_that_does_not_fit_the_data_is_a_clean_error(tmp_path, capsys):
    code = cli.main(["run", "--backend", "local", "--partition", "random", "--num-clients", "500", "--no-progress",
                     "--output-dir", str(tmp_path), "--synthetic", "{nodes_per_domain: 60, num_features: 8}"])
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("fgl-ray: random partition needs") and "Traceback" not in err
    assert not any(tmp_path.iterdir())                                          # nothing ran, nothing written


def test_preset_run_with_fedia_on_fedprox_parses(monkeypatch):
    captured = {}
    monkeypatch.setattr(cli, "_run", lambda args: captured.setdefault("values", cli._config_values(args)) and 0)
    cli.main(["run", "--preset", "twitch-S3", "--algorithm", "fedprox", "--aggregator", "fedia",
              "--aggregator-options", "{rho: 0.5, beta: 0.7}"])
    assert captured["values"] == {"preset": "twitch-S3", "algorithm": "fedprox", "aggregator": "fedia",
                                  "aggregator_options": {"rho": 0.5, "beta": 0.7}}


def test_datasets_reports_offline_availability(shared_datasets, capsys):
    assert cli.main(["datasets", "--data-dir", str(shared_datasets)]) == 0
    lines = {line.split()[0]: line.split() for line in capsys.readouterr().out.splitlines()[2:]}
    assert lines["twitch"][2] == "yes" and lines["cora"][2] == "yes"


def test_graph_classification_with_gcfl_plus_runs_from_the_command_line(tmp_path, capsys):
    code = cli.main(["run", "--dataset", "synthetic-graphs", "--task", "graph", "--algorithm", "gcfl_plus",
                     "--num-clients", "3", "--rounds", "2", "--backend", "local", "--no-progress",
                     "--output-dir", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert "gcfl_plus+mean" in out and "CLIENTS" in out
    assert "gcfl_plus+mean: local work" in out and "node batching" not in out    # graphs, not sampled nodes
    (run_dir,) = tmp_path.iterdir()
    assert (run_dir / "clusters.json").is_file() and (run_dir / "clusters.png").is_file()


def test_a_task_the_dataset_does_not_offer_is_refused_with_its_tasks(capsys):
    assert cli.main(["run", "--dataset", "synthetic", "--task", "graph"]) == 2
    assert "its tasks: node-classification" in capsys.readouterr().err


def test_fedmgs_link_prediction_with_missing_modalities_runs_on_its_synthetic_default(tmp_path, capsys):
    code = cli.main(["run", "--algorithm", "fedmgs", "--task", "link-prediction", "--missing", "node:0.5",
                     "--rounds", "2", "--local-epochs", "1", "--synthetic", "{num_nodes: 300}", "--backend", "local",
                     "--no-progress", "--output-dir", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out
    assert out.startswith("synthetic-mm: 5 clients") and "auc" in out


def test_a_named_comparison_gives_every_run_its_own_folder(tmp_path, capsys):
    arguments = ["run", "--backend", "local", "--rounds", "1", "--no-progress", "--output-dir", str(tmp_path),
                 "--synthetic", "{nodes_per_domain: 60, num_features: 8}", "--hidden", "8", "--run-name", "cmp"]
    assert cli.main(arguments) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cmp-fedavg", "cmp-local", "comparison-cmp-fedavg.png"]
    assert cli.main(arguments) == 2                                    # the same names again: refused
    assert "already holds a run's results" in capsys.readouterr().err


TINY_RUN = ["run", "--backend", "local", "--rounds", "3", "--no-progress", "--synthetic",
            "{nodes_per_domain: 60, num_features: 8}", "--hidden", "8", "--algorithm", "fedavg"]


def test_more_min_clients_than_clients_is_refused_before_anything_runs(tmp_path, capsys):
    assert cli.main(TINY_RUN + ["--output-dir", str(tmp_path), "--min-clients", "100"]) == 2
    assert "min_clients 100 exceeds the 6 clients" in capsys.readouterr().err
    assert not any(tmp_path.iterdir())


def test_a_run_that_loses_most_clients_exits_non_zero_and_says_once_why(tmp_path, capsys):
    failing = "{0: [0, 1, 2, 3, 4], 1: [0, 1, 2, 3, 4], 2: [0, 1, 2, 3, 4]}"
    code = cli.main(TINY_RUN + ["--output-dir", str(tmp_path), "--failures", failing, "--min-clients", "2"])
    captured = capsys.readouterr()
    assert code == 1
    assert "is incomplete" in captured.err and "0 of 3 rounds aggregated" in captured.err
    assert captured.err.count("aggregated nothing") == 0 and captured.out.count("aggregated nothing") <= 1
    printed = captured.out + captured.err
    assert printed.count("failed in train: SimulatedClientFailure") == 1       # said once ...
    assert "15 failures in train like" in printed                               # ... and counted
    (run_dir,) = tmp_path.iterdir()
    summary = __import__("json").loads((run_dir / "summary.json").read_text())
    assert summary["coverage"]["complete"] is False and summary["coverage"]["rounds_aggregated"] == 0


def test_an_unexpected_error_before_the_first_round_is_one_line_naming_the_stage(tmp_path, monkeypatch, capsys):
    import fgl_ray.data

    def broken(config):
        raise RuntimeError("disk\nfull")

    monkeypatch.setattr(fgl_ray.data, "build_federated_data", broken)
    assert cli.main(TINY_RUN + ["--output-dir", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith("fgl-ray: RuntimeError: disk full while building the data of --dataset synthetic")
    assert "--debug" in err and "Traceback" not in err and len(err.splitlines()) == 1
    with pytest.raises(RuntimeError, match="disk"):                            # --debug shows the traceback
        cli.main(TINY_RUN + ["--output-dir", str(tmp_path), "--debug"])
    monkeypatch.setenv(cli.DEBUG_ENV, "1")
    with pytest.raises(RuntimeError, match="disk"):
        cli.main(TINY_RUN + ["--output-dir", str(tmp_path)])


def test_running_out_of_memory_is_said_in_one_line(tmp_path, monkeypatch, capsys):
    import fgl_ray.data

    def exhausted(config):
        raise MemoryError()

    monkeypatch.setattr(fgl_ray.data, "build_federated_data", exhausted)
    assert cli.main(TINY_RUN + ["--output-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err.startswith("fgl-ray: out of memory while building the data")


def test_an_unexpected_error_in_a_grid_or_report_is_one_line(tmp_path, monkeypatch, capsys):
    import fgl_ray.tune.report

    def broken(folder):
        raise RuntimeError("disk gone")

    monkeypatch.setattr(fgl_ray.tune.report, "is_grid_folder", broken)
    assert cli.main(["report", str(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"fgl-ray: RuntimeError: disk gone while redrawing {tmp_path}")
    assert len(err.splitlines()) == 1


def test_a_run_without_a_test_figure_exits_non_zero(tmp_path):
    scored = {"all": {"accuracy": {"mean": 0.5, "std": 0.0}}}
    assert cli._scored(scored, "accuracy")
    assert not cli._scored({"all": {"accuracy": {"mean": float("nan"), "std": 0.0}}}, "accuracy")
    assert not cli._scored({"all": {"accuracy": {"mean": None, "std": None}}}, "accuracy")
    assert not cli._scored({"all": {}}, "accuracy")


@pytest.mark.parametrize(("manifest", "checkpoint", "says"), [
    ("{not json", b"", "manifest.json is damaged or not fgl-ray's (JSONDecodeError"),
    ("[1, 2]", b"", "manifest.json is damaged or not fgl-ray's (TypeError"),
    ('{"config": {"rounds": 2}}', b"PK\x03\x04 cut short", "checkpoint.pt is damaged (truncated, or not a checkpoint)"),
])
def test_a_damaged_run_folder_is_refused_on_resume_before_anything_runs(tmp_path, monkeypatch, capsys, manifest,
                                                                         checkpoint, says):
    from fgl_ray.runtime.checkpoint import CHECKPOINT_FILE

    monkeypatch.setattr(cli, "_simulator", lambda *args: pytest.fail("Ray must not start on bad input"))
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "manifest.json").write_text(manifest)
    (folder / CHECKPOINT_FILE).write_bytes(checkpoint)
    assert cli.main(["run", "--resume", str(folder)]) == 2
    assert says in capsys.readouterr().err


def test_report_names_a_damaged_file_of_a_run_folder(tmp_path, capsys):
    run = tmp_path / "run"
    assert cli.main(TINY_RUN + ["--output-dir", str(tmp_path), "--run-name", "run"]) == 0
    (run / "summary.json").write_text("{not json")
    capsys.readouterr()
    assert cli.main(["report", str(run)]) == 2
    assert "a file in" in capsys.readouterr().err
    (run / "summary.json").unlink()
    part = next((run / "metrics.parquet").iterdir())
    part.write_bytes(b"not parquet")
    assert cli.main(["report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "is damaged or not fgl-ray's" in err and part.name in err


def test_a_model_too_big_for_the_machine_is_refused_after_the_data_and_before_training(tmp_path, monkeypatch):
    from fgl_ray.config import ConfigError, load_config
    from fgl_ray.data import build_federated_data, synthetic
    from fgl_ray.runtime.federation import check_memory

    config = load_config({"synthetic": {"nodes_per_domain": 60, "num_features": 8}, "hidden": 8, "backend": "local",
                          "output_dir": str(tmp_path)})
    data = build_federated_data(config)
    check_memory(config, data)                                                  # a small model fits
    parameters = 8 * 8 + 8 + 8 * 4 + 4                                          # GCN 8 -> 8 -> 4 classes
    nodes = max(g.data.num_nodes for g in data.clients)
    activations = 4 * 8 * 4 * nodes * 2                                         # 4 floats x nodes x hidden x layers
    needed = 4 * 3 * parameters * len(data.clients) + activations              # SGD: 3 slots, every client's model
    monkeypatch.setattr(synthetic, "machine_memory", lambda: needed)
    check_memory(config, data)                                                  # exactly the machine: fits
    monkeypatch.setattr(synthetic, "machine_memory", lambda: needed - 1)
    with pytest.raises(ConfigError, match=f"has {parameters} parameters.*the 6 clients in this process need"):
        check_memory(config, data)
    check_memory(config.model_copy(update={"backend": "ray"}), data)            # one client per worker fits
    sampled = config.model_copy(update={"node_batching": "neighbor", "eval_batching": "sampled", "batch_size": 1,
                                        "num_neighbors": [1, 1]})
    check_memory(sampled, data)                                                 # a batch reaches at most 4 nodes
