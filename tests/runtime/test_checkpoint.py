"""Checkpoint and resume: a federation stopped after a checkpoint and resumed gives the metric rows
of the uninterrupted run, on both backends; restarted client actors load the last checkpoint."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from fgl_ray.config import ConfigError
from fgl_ray.results import read_metrics
from fgl_ray.runtime import run_experiment
from fgl_ray.runtime.checkpoint import CHECKPOINT_FILE


class Crash(Exception):
    """Stands in for the driver dying after some round."""


def crash_after(round_index: int):
    def on_round(result, rows):
        if result.round == round_index:
            raise Crash
    return on_round


def metric_rows(run_dir) -> pd.DataFrame:
    """Every metric row but wall-clock timings, in a fixed order."""
    frame = read_metrics(run_dir).drop(columns="run_id")
    frame = frame[~frame.metric.str.contains("seconds")]
    keys = [c for c in frame.columns if c != "value"]
    return frame.sort_values(keys).reset_index(drop=True)


def crashed_and_resumed(make, data, crash_round: int, **changes):
    """(uninterrupted run, the run crashed after ``crash_round`` and resumed) with the same settings."""
    whole = run_experiment(make(run_name="whole", **changes), data, progress=False)
    config = make(run_name="resumed", checkpoint_every=2, **changes)
    with pytest.raises(Crash):
        run_experiment(config, data, progress=False, on_round=crash_after(crash_round))
    assert (whole.run_dir.parent / "resumed" / CHECKPOINT_FILE).is_file()
    resumed = run_experiment(config, data, progress=False, resume=True)
    return whole, resumed


@pytest.mark.parametrize("changes", [
    {"algorithm": "fedavg", "aggregator": "fedadam"},           # server moments
    {"algorithm": "fedavg", "aggregator": "fedia"},             # FedIA's alpha, server RNG
    {"algorithm": "moon", "optimizer_state": "keep"},           # previous local model, kept Adam/SGD state
    {"algorithm": "feddyn", "fraction_fit": 0.67},              # client gradients, client sampling
    {"algorithm": "fedproto"},                                  # prototype banks, personalised heads
    {"algorithm": "gcfl"},                                      # clusters and norm sequences
    {"algorithm": "fedgta", "aggregator": "fedia"},             # personal server models, FedIA's alpha
    {"algorithm": "fgssl"},                                     # frozen teacher, random views
    {"algorithm": "fggp"},                                      # kNN view, edge generator, prototype banks
    {"algorithm": "adafgl", "algorithm_options": {"federated_rounds": 2}},   # resumes in stage 2
    {"algorithm": "fedsage_plus", "algorithm_options": {"gen_rounds": 3, "latent": 8}},  # generators, banks, mending
    {"algorithm": "fedsage_plus", "algorithm_options": {"gen_rounds": 3, "latent": 8, "schedule": "authors",
                                                        "pretrain_epochs": 2}},   # local classifiers, fGen's Adams
    {"algorithm": "fedspa", "fraction_fit": 0.67},              # edge types, energies, HBDA reports, sampling
    {"algorithm": "fedspa", "aggregator": "fedia"},             # FedIA (repl.)
    {"algorithm": "fedtad", "aggregator": "fedia"},             # server generator and Adams, FedIA's alpha
    {"algorithm": "fedtad", "algorithm_options": {"topology": "walk_ids"}, "fraction_fit": 0.67},
    {"algorithm": "fedprox", "node_batching": "neighbor", "num_neighbors": [3, 2], "batch_size": 8,
     "eval_batching": "sampled"},                               # sampled batches in training and evaluation
])
def test_a_crashed_and_resumed_run_equals_the_uninterrupted_one(tiny_config, tiny_data, changes):
    whole, resumed = crashed_and_resumed(tiny_config, tiny_data, 2, backend="local", rounds=6, **changes)
    pd.testing.assert_frame_equal(metric_rows(resumed.run_dir), metric_rows(whole.run_dir))
    assert resumed.summary["coverage"]["complete"] and resumed.summary["coverage"]["rounds"] == 6
    assert not (resumed.run_dir / CHECKPOINT_FILE).exists()              # finished: nothing left to resume
    assert "checkpoint" not in resumed.summary
    (resume,) = json.loads((resumed.run_dir / "manifest.json").read_text())["resumes"]
    assert resume["from_round"] == 2 and resume["backend"] == "local"


def test_resuming_from_an_older_checkpoint_redoes_the_later_rounds(tiny_config, tiny_data):
    """Rows written after the checkpoint (round 3 here) are discarded, not doubled."""
    whole, resumed = crashed_and_resumed(tiny_config, tiny_data, 3, backend="local", rounds=5, algorithm="fedprox")
    rows = metric_rows(resumed.run_dir)
    assert not rows.duplicated([c for c in rows.columns if c != "value"]).any()
    pd.testing.assert_frame_equal(rows, metric_rows(whole.run_dir))


def test_a_multimodal_fedmgs_run_resumes_exactly(tiny_multimodal_config, tiny_multimodal_data):
    whole, resumed = crashed_and_resumed(tiny_multimodal_config, tiny_multimodal_data, 2, backend="local", rounds=4,
                                         algorithm="fedmgs", task="link-prediction")
    pd.testing.assert_frame_equal(metric_rows(resumed.run_dir), metric_rows(whole.run_dir))


def test_a_ray_run_resumes_exactly(request, tiny_config, tiny_data):
    request.getfixturevalue("ray_session")
    whole, resumed = crashed_and_resumed(tiny_config, tiny_data, 2, backend="ray", rounds=5, algorithm="moon",
                                         clients_per_actor=2)
    pd.testing.assert_frame_equal(metric_rows(resumed.run_dir), metric_rows(whole.run_dir))


def test_resume_needs_a_checkpoint(tiny_config, tiny_data):
    finished = run_experiment(tiny_config(backend="local", run_name="done"), tiny_data, progress=False)
    with pytest.raises(ConfigError, match="holds no checkpoint.pt"):
        run_experiment(tiny_config(backend="local", run_name="done"), tiny_data, progress=False, resume=True)
    assert json.loads((finished.run_dir / "summary.json").read_text())["coverage"]["complete"]


@pytest.mark.parametrize("checkpoint_every", [1, 0])
def test_a_restarted_actor_loads_its_clients_from_the_last_checkpoint(request, tiny_config, tiny_data,
                                                                      checkpoint_every):
    """``local`` keeps each client's own model: client 0's actor dies in round 3's training, Ray
    restarts it for the evaluation, and it loads the checkpoint written after round 2, so its round-3
    scores equal its round-2 scores; without a checkpoint it is rebuilt and scores its initial model."""
    request.getfixturevalue("ray_session")
    kill = [{"kind": "kill", "clients": [0], "rounds": [3]}]
    result = run_experiment(tiny_config(backend="ray", rounds=5, algorithm="local", faults=kill, clients_per_actor=1,
                                        checkpoint_every=checkpoint_every), tiny_data, progress=False)
    rows = read_metrics(result.run_dir)
    client0 = rows[(rows.client_id == "0") & rows.split.isin(["val", "test"])].pivot_table(
        index=["split", "metric"], columns="round", values="value")
    assert client0[3].equals(client0[2]) == bool(checkpoint_every)
    assert result.summary["coverage"]["complete"]
