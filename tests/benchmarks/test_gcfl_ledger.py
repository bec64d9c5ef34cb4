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
                              seeds=1, methods=["self-train", "GCFL"], reuse=True, ledger=tmp_path / "ledger.jsonl")
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
    assert all(gcfl_run["authors"][c] >= gcfl_run["final"][c] for c in gcfl_run["final"])   # best over snapshots
