"""The benchmark scripts' own helpers keep up with the library's messages (they run for hours)."""

import sys
from pathlib import Path

import numpy as np

from fgl_ray.messages import ClientEvaluation
from fgl_ray.runtime.server import RoundResult

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fedia_common  # noqa: E402


def test_the_fedia_benchmark_keeps_per_domain_test_confusions(tmp_path):
    collect = fedia_common.save_confusions(tmp_path, ["a", "b"], {0: "a", 1: "b", 2: "a"})
    matrices = {c: np.array([[c + 1, 0], [0, 1]]) for c in range(3)}
    evaluations = [ClientEvaluation(c, {"test": {"confusion": m}}) for c, m in matrices.items()]
    collect(RoundResult(round=4, selected=[0, 1, 2], updates={}, evaluations=evaluations, failures=[],
                        aggregated=True, seconds=0.0), [])
    collect.write()
    saved = np.load(tmp_path / "test_confusions.npz")
    assert saved["rounds"].tolist() == [4]
    assert np.array_equal(saved["confusions"][0, 0], matrices[0] + matrices[2])
    assert np.array_equal(saved["confusions"][0, 1], matrices[1])


def test_the_run_ledger_finds_a_run_by_its_experiment_not_by_where_it_ran(tmp_path):
    from fgl_ray.config import load_config

    ledger = fedia_common.RunLedger(tmp_path / "ledger.jsonl")
    base = {"dataset": "synthetic-mm", "task": "link-prediction", "missing": "node:0.5", "algorithm": "fedmgs",
            "seed": 1, "run_name": "r"}
    config = load_config(base | {"output_dir": str(tmp_path / "a"), "torch_threads": 1})
    assert ledger.lookup(config) is None
    ledger.record(config, {"auc": 0.75})
    ledger.record(config, {"auc": 0.75})
    assert len(ledger.path.read_text().splitlines()) == 1
    assert ledger.lookup(load_config(base | {"output_dir": str(tmp_path / "b"), "torch_threads": 2})) == {"auc": 0.75}
    assert ledger.lookup(load_config(base | {"seed": 2})) is None
    assert ledger.lookup(load_config(base | {"model_options": {"readout_context": "graph"}})) is None
    ledger.record(config, {"auc": 0.8})
    assert ledger.lookup(config) == {"auc": 0.8}


def test_a_ledger_entry_made_under_other_option_defaults_is_another_experiment(tmp_path):
    """Entries keep the options the run took with their defaults; when a default changes, the
    recorded run no longer answers for the new one (entries without them match as before)."""
    import inspect
    import json

    from fgl_ray.config import load_config
    from fgl_ray.models import MODELS

    ledger = fedia_common.RunLedger(tmp_path / "ledger.jsonl")
    config = load_config({"dataset": "tu-proteins", "algorithm": "gcfl_plus", "seed": 0})
    ledger.record(config, {"accuracy": 0.7})
    entry = json.loads(ledger.path.read_text())
    assert entry["resolved"]["algorithm"]["sequence"] == "gradient_norm"      # a default, not asked for
    gin = inspect.signature(MODELS.get(config.model)).parameters                # the backbone's defaults too
    assert config.model == "gin" and entry["resolved"]["model"] == {"share": gin["share"].default}
    entry["resolved"]["algorithm"]["sequence"] = "update_norm"                  # as if the default were older
    ledger.path.write_text(json.dumps(entry) + "\n")
    assert ledger.lookup(config) is None
    del entry["resolved"]
    ledger.path.write_text(json.dumps(entry) + "\n")                          # an entry from before resolved options
    assert ledger.lookup(config) == {"accuracy": 0.7}


def test_the_fedmgs_benchmark_composes_only_the_rows_asked_for(tmp_path, monkeypatch):
    import fedmgs

    results = tmp_path / "RESULTS.md"
    monkeypatch.setattr(sys, "argv", ["fedmgs.py", "main", "--methods", "FedMGS (graph readout)", "FedProto",
                                      "--tasks", "node-classification", "--clients", "5", "--finished-only",
                                      "--ledger", str(tmp_path / "empty.jsonl"), "--out", str(tmp_path / "runs"),
                                      "--results-file", str(results), "--section-suffix=-rows"])
    fedmgs.main()
    section = results.read_text().split("<!-- fedmgs-main-rows:begin -->")[1]
    rows = [line.split("|")[1].strip() for line in section.splitlines() if line.startswith("| ") and "ρ=" not in line]
    assert rows == ["FedProto", "FedMGS (graph readout)"]
    assert "| — | — | — |" in section


def test_a_benchmark_run_killed_with_its_session_continues_from_its_checkpoint(tmp_path, capsys):
    """complete_run checkpoints every CHECKPOINT_EVERY rounds and continues a folder that holds a
    checkpoint of the same experiment: its rows and confusions equal an uninterrupted run's."""
    import pandas as pd
    import pytest

    from fgl_ray.config import load_config
    from fgl_ray.data import build_federated_data
    from fgl_ray.results import read_metrics
    from fgl_ray.runtime.checkpoint import CHECKPOINT_FILE

    class Killed(Exception):
        pass

    def values(name):
        return {"synthetic": {"num_domains": 2, "nodes_per_domain": 40, "num_features": 8}, "hidden": 8,
                "rounds": 5, "backend": "local", "torch_threads": 1, "output_dir": str(tmp_path), "run_name": name,
                "overwrite": True}

    def rows(folder):
        frame = read_metrics(folder).drop(columns="run_id")
        frame = frame[~frame.metric.str.contains("seconds")]
        return frame.sort_values([c for c in frame.columns if c != "value"]).reset_index(drop=True)

    def run(name, kill_after=None):
        config = load_config(values(name))
        domain_of = {graph.client_id: graph.domain for graph in data.clients}
        collect = fedia_common.save_confusions(tmp_path / name, data.domains, domain_of)

        def on_round(result, round_rows):
            collect(result, round_rows)
            if result.round == kill_after:
                raise Killed
        return fedia_common.complete_run(config, data, on_round=on_round)

    data = build_federated_data(load_config(values("whole")))
    original, fedia_common.CHECKPOINT_EVERY = fedia_common.CHECKPOINT_EVERY, 2
    try:
        whole = run("whole")
        with pytest.raises(Killed):
            run("killed", kill_after=3)                           # dies in round 3, after a checkpoint
        assert (tmp_path / "killed" / CHECKPOINT_FILE).is_file()
        resumed = run("killed")
    finally:
        fedia_common.CHECKPOINT_EVERY = original
    assert "killed: continuing" in capsys.readouterr().out
    pd.testing.assert_frame_equal(rows(resumed.run_dir), rows(whole.run_dir))
    saved = [np.load(folder / "test_confusions.npz") for folder in (whole.run_dir, resumed.run_dir)]
    assert saved[1]["rounds"].tolist() == list(range(5))
    assert np.array_equal(saved[0]["confusions"], saved[1]["confusions"])


def test_a_run_is_the_same_experiment_whatever_its_folder_is_called(tmp_path):
    from fgl_ray.config import load_config

    config = load_config({"output_dir": str(tmp_path), "run_name": "x-fill_mean-s0"})
    recorded = fedia_common.as_json(dict(config)) | {"run_name": "x-fill=mean-s0", "output_dir": "/elsewhere"}
    assert fedia_common.same_experiment(recorded, config)
    assert not fedia_common.same_experiment(recorded | {"hidden": 7}, config)
