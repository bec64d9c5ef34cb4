"""The GCFL rows of the fidelity table come from the GCFL ledger alone: a setting with every run
recorded gets its claims, with figures equal to those derived straight from the records; a
setting with a run missing is skipped."""

import argparse
import re
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fidelity  # noqa: E402
import gcfl  # noqa: E402

SYN = {"dataset": "synthetic-graphs", "num_clients": 3}


def test_gcfl_claims_come_from_the_ledger_and_a_setting_missing_a_run_is_skipped(tmp_path, monkeypatch):
    ledger = tmp_path / "ledger.jsonl"
    monkeypatch.setattr(gcfl, "SETTINGS", {"syn": SYN, "syn-unrun": SYN | {"num_clients": 4}})
    args = argparse.Namespace(backend="local", torch_threads=1, rounds=3, out=tmp_path / "runs", data_dir=None,
                              seeds=1, methods=["self-train", "FedAvg", "CFL"], reuse=True, ledger=ledger)
    ours = gcfl.run_setting("syn", SYN, args)
    assert gcfl.recorded_results("syn", 1, ledger, rounds=3) is None        # chunks_ordered not run yet
    gcfl.run_setting("syn", SYN, args, gcfl.ORDERED)

    monkeypatch.setattr(gcfl, "complete_run", lambda *a, **k: pytest.fail("the fidelity table must not run anything"))
    rows = fidelity.gcfl_rows(ledger, seeds=1, rounds=3)
    assert len(rows) == 4 and all("(syn)" in row for row in rows)          # 2 methods x 2 protocols; syn-unrun skipped

    final = {label: records[0]["final"] for label, records in ours.items()}
    for method, row in zip(("GCFL", "GCFL+"), rows[:2]):
        expected = 100 * np.mean([final[method][c] - final[gcfl.SELF_TRAIN][c] for c in final[method]])
        shown = float(re.search(r"\| ([+-]\d+\.\d\d) ± ", row).group(1))
        assert abs(shown - expected) < 0.006
        assert "positive (figure not in the extracted text)" in row
        assert ("does not hold" in row) == (expected <= 0)



def test_the_papers_counts_of_clients_helped_hold_only_when_every_seed_meets_them():
    (twice, every) = fidelity.helped_claims("molecules", clients=7)
    assert twice[2] == every[2] == "GCFL+"
    assert twice[3](6, 3) and not twice[3](5, 3) and every[3](7, 0) and not every[3](6, 0)
    (gcfl_more, _) = fidelity.helped_claims("nci1", clients=30)
    assert gcfl_more[3](20, 10) and not gcfl_more[3](19, 10)
    assert fidelity.helped_claims("proteins", clients=10) == []
    assert fidelity.count_verdict([True, True, True], True) == "holds"
    assert fidelity.count_verdict([True, False, True], True) == "holds in direction only"
    assert fidelity.count_verdict([True, False, True], False) == "does not hold"
