"""The FedIA benchmark's Twitch tables come out the same from the run folders and from its ledger
alone (run folders do not survive a fresh checkout; the ledger is committed)."""

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import fedia_common  # noqa: E402


def test_twitch_tables_from_the_ledger_equal_those_from_the_run_folders(shared_datasets, tmp_path, monkeypatch):
    monkeypatch.setenv("FGL_DATA_DIR", str(shared_datasets))
    args = argparse.Namespace(algorithms=None, aggregators=["mean", "fedia"], features="raw", optimizer_state="reset",
                              lr=None, rounds=2, backend="local", torch_threads=1, out=tmp_path / "runs", reuse=True,
                              seeds=1, ledger=tmp_path / "ledger.jsonl")
    pairs = {"fedavg": (0.1, 0.1)}
    ran = fedia_common.run_setting("twitch-S1", pairs, args)
    assert len(args.ledger.read_text().splitlines()) == 2

    monkeypatch.setattr(fedia_common, "complete_run", lambda *a, **k: pytest.fail("a recorded run must not run again"))
    monkeypatch.setattr(fedia_common, "build_federated_data", lambda *a: pytest.fail("a recorded table loads no data"))
    args.out = tmp_path / "elsewhere"                       # a fresh checkout: no run folders
    recomposed = fedia_common.run_setting("twitch-S1", pairs, args)
    order = ["DE", "EN", "ES", "FR", "PT", "RU"]
    assert (fedia_common.markdown_table("twitch-S1", ran, {}, order)
            == fedia_common.markdown_table("twitch-S1", recomposed, {}, order))
    assert fedia_common.gains(ran) == fedia_common.gains(recomposed)
    assert len(args.ledger.read_text().splitlines()) == 2   # nothing recorded twice
    assert set(recomposed[0][1][0]) == {*fedia_common.TABLE_FIELDS, "best_validation"}


def test_a_base_method_names_its_backbone_and_one_backbone_option():
    assert fedia_common.method_values("fggp") == {"algorithm": "fggp"}
    assert fedia_common.method_values("fedavg@sage") == {"algorithm": "fedavg", "model": "sage"}
    assert fedia_common.method_values(fedia_common.FEDSPA_NORMALISED) == {
        "algorithm": "fedspa", "model": "acm_gcn", "model_options": {"typed_aggregation": "normalised"}}
    assert fedia_common.method_values("fedavg@pmlp_gcn:propagate_in_training=true")["model_options"] == {
        "propagate_in_training": True}
