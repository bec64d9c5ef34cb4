"""The GCFL benchmark's tables come out the same from the run folders and from its ledger alone
(run folders do not survive a fresh checkout; the ledger is committed)."""

import argparse
import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import gcfl  # noqa: E402


def test_tables_from_the_ledger_equal_those_from_the_run_folders(tmp_path, monkeypatch):
    setting = {"dataset": "synthetic-graphs", "num_clients": 3}
    args = argparse.Namespace(backend="local", torch_threads=1, rounds=3, out=tmp_path / "runs", data_dir=None,
                              seeds=1, methods=["self-train", "CFL"], reuse=True, ledger=tmp_path / "ledger.jsonl")
    ran = gcfl.run_setting("syn", setting, args)
    assert sorted(ran) == ["GCFL", "GCFL+", "self-train (local)"]
    assert len(args.ledger.read_text().splitlines()) == 3

    monkeypatch.setattr(gcfl, "complete_run", lambda *a, **k: pytest.fail("a recorded run must not run again"))
    args.out = tmp_path / "elsewhere"                       # a fresh checkout: no run folders
    recomposed = gcfl.run_setting("syn", setting, args)
    assert json.loads(json.dumps(ran)) == recomposed
    assert gcfl.table("syn", ran) == gcfl.table("syn", recomposed)
    steps = gcfl.protocol_steps(True, ran, ran), gcfl.protocol_steps(True, recomposed, recomposed)
    assert steps[0] == steps[1]
    assert len(args.ledger.read_text().splitlines()) == 3   # nothing recorded twice

    (gcfl_run,) = ran["GCFL"]
    assert gcfl_run["clusters"] >= 1 and ran["self-train (local)"][0]["clusters"] is None

    entry = json.loads(args.ledger.read_text().splitlines()[0])          # the ledger answers before a folder
    entry["figures"]["final_avg"] = -1.0
    args.ledger.write_text(json.dumps(entry) + "\n")
    args.out = tmp_path / "runs"
    assert gcfl.run_setting("syn", setting, args)["self-train (local)"][0]["final_avg"] == -1.0


def test_the_authors_figure_is_each_clients_best_test_accuracy_over_its_clusters_split_snapshots():
    import pandas as pd

    test = pd.DataFrame({"0": [0.1, 0.9, 0.2, 0.3], "1": [0.5, 0.2, 0.8, 0.4], "2": [0.9, 0.9, 0.9, 0.1]})
    changes = [{"round": 0, "clusters": {"0": [0, 1, 2]}},
               {"round": 2, "clusters": {"0": [0, 1], "1": [2]}},        # all three split after round 1
               {"round": 3, "clusters": {"0": [0], "2": [1], "1": [2]}}]  # 0 and 1 split after round 2
    final = test.iloc[-1].to_dict()
    best = gcfl.authors_figure(final, test, changes)
    assert best == {"0": max(0.3, 0.9, 0.2), "1": max(0.4, 0.2, 0.8), "2": max(0.1, 0.9)}
    assert gcfl.authors_figure(final, test, None) == final              # no clustering: the final figure


def test_a_run_without_self_training_writes_its_table_and_skips_the_protocol_table(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(gcfl.SETTINGS, "syn", {"dataset": "synthetic-graphs", "num_clients": 3})
    args = argparse.Namespace(settings=["syn"], methods=["FedAvg"], seeds=1, protocol="both", rounds=2,
                              backend="local", torch_threads=1, data_dir=None, reuse=False, out=tmp_path / "runs",
                              results_file=None, section_suffix="", no_write=True, ledger=tmp_path / "ledger.jsonl")
    gcfl.reproduce(args)
    out = capsys.readouterr().out
    assert "| FedAvg |" in out and "no protocol table without self-training" in out


def test_a_full_label_picks_that_method_alone_and_other_text_every_label_holding_it():
    def picked(parts):
        return [label for label in gcfl.METHODS if gcfl.selected(label, parts)]

    assert picked(["GCFL"]) == ["GCFL"]
    assert picked(["GCFL+"]) == ["GCFL+"]
    assert picked(["CFL"]) == ["GCFL", "GCFL+"]
    assert picked(["self-train", "FedAvg"]) == ["self-train (local)", "FedAvg"]
    assert picked(None) == list(gcfl.METHODS)
