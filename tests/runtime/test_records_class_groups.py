"""Head/medium/tail accuracy in the overall rows, from the global training class order."""

from __future__ import annotations

import numpy as np

from fgl_ray.config import load_config
from fgl_ray.messages import ClientEvaluation
from fgl_ray.metrics import class_frequency_order
from fgl_ray.runtime.records import round_rows
from fgl_ray.runtime.server import RoundResult
from fgl_ray.tasks import build_task

TASK = build_task(load_config({}))


def result_with(confusions):
    evaluations = [ClientEvaluation(client_id=cid, stats={"val": {"confusion": cm}, "test": {"confusion": cm}})
                   for cid, cm in confusions.items()]
    return RoundResult(round=0, selected=list(confusions), updates={}, evaluations=evaluations, failures=[],
                       aggregated=True, seconds=0.0)


def overall(rows, split="test"):
    return {r["metric"]: r["value"] for r in rows if r["client_id"] == "server" and r["domain"] == "all"
            and r["split"] == split}


def test_overall_rows_carry_head_medium_tail_accuracy_by_global_training_order():
    # 6 classes; global training counts make the order 4, 1, 0, 5, 2, 3 (head -> tail).
    counts = np.array([30, 50, 8, 2, 90, 10])
    order = class_frequency_order(counts)
    assert order.tolist() == [4, 1, 0, 5, 2, 3]
    a = np.diag([5, 4, 3, 2, 1, 6]).astype(np.int64)
    a[0, 1] = 5          # class 0: 3 right of 8
    a[3, 4] = 2          # class 3: 2 right of 4
    b = np.diag([1, 0, 1, 0, 1, 0]).astype(np.int64)
    b[1, 2] = 4          # class 1: 4 right of 8 over both clients
    rows = round_rows(result_with({0: a, 1: b}), {0: "d0", 1: "d1"}, TASK, class_order=order)
    pooled = a + b
    right, support = np.diag(pooled), pooled.sum(1)
    groups = {"head": [4, 1], "medium": [0, 5], "tail": [2, 3]}
    scores = overall(rows)
    for name, classes in groups.items():
        assert scores[f"{name}_accuracy"] == right[classes].sum() / support[classes].sum()
    cut = round_rows(result_with({0: a}), {0: "d0"}, TASK, class_order=order, class_group_cuts=(0.5, 0.5))
    assert "medium_accuracy" not in overall(cut)                          # an empty group is left out
    assert overall(cut)["head_accuracy"] == np.diag(a)[[4, 1, 0]].sum() / a.sum(1)[[4, 1, 0]].sum()
    per_client = [r for r in rows if r["client_id"] != "server" and "head" in r["metric"]]
    assert per_client == []                                              # only the overall rows


def test_without_an_order_the_rows_are_unchanged():
    cm = np.eye(3, dtype=np.int64)
    assert not any("head" in r["metric"] for r in round_rows(result_with({0: cm}), {0: "d"}, TASK))


def test_a_run_records_class_groups_and_writes_the_class_plot(tiny_config, tiny_data):
    import json

    from fgl_ray.results import read_metrics
    from fgl_ray.runtime import run_experiment

    assert "class_counts" in tiny_data.meta
    result = run_experiment(tiny_config(backend="local", rounds=1), tiny_data, progress=False)
    frame = read_metrics(result.run_dir)
    groups = frame[(frame.client_id == "server") & frame.metric.isin(["head_accuracy", "tail_accuracy"])]
    assert set(groups.domain) == {"all"} and set(groups.split) == {"val", "test"}
    saved = json.loads((result.run_dir / "class_accuracy.json").read_text())
    assert saved["class_counts"] == list(tiny_data.meta["class_counts"])
    assert (result.run_dir / "class_accuracy.png").stat().st_size > 0
