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
