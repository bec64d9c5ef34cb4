"""Coverage counts and the failure log."""

import io
import json

from fgl_ray.messages import ClientEvaluation, ClientFailure
from fgl_ray.runtime.coverage import Coverage, FailureLog
from fgl_ray.runtime.server import RoundResult


def _round(index, updates, evaluations, failures, aggregated=True):
    return RoundResult(round=index, selected=[0, 1, 2, 3], updates={c: {} for c in updates},
                       evaluations=[ClientEvaluation(c, {}) for c in evaluations], failures=failures,
                       aggregated=aggregated, seconds=0.0)


def test_a_failed_final_evaluation_makes_the_run_incomplete():
    coverage = Coverage(clients=4, min_clients=1)
    coverage.observe(_round(0, [0, 1, 2, 3], [0, 1, 2, 3], []))
    coverage.observe(_round(1, [0, 1, 2, 3], [], [ClientFailure(c, "evaluate", "boom") for c in range(4)]))
    report = coverage.report(0.9)
    assert report["clients_evaluated_last"] == 0 and not report["complete"]
    assert report["problems"] == ["the last evaluation covered 0 of 4 clients"]


def test_a_run_stopped_before_its_planned_rounds_is_interrupted_and_incomplete():
    coverage = Coverage(clients=4, min_clients=1)
    for index in range(3):
        coverage.observe(_round(index, [0, 1, 2, 3], [0, 1, 2, 3], []))
    assert coverage.report(0.9, planned_rounds=3)["complete"]
    report = coverage.report(0.9, planned_rounds=10)
    assert report["interrupted"] and not report["complete"]
    assert report["problems"] == ["interrupted after 3 of 10 rounds"]


def test_the_first_round_without_aggregation_is_said_once():
    coverage = Coverage(clients=4, min_clients=3)
    lines = [coverage.observe(_round(r, [0], [0, 1, 2, 3], [], aggregated=False)) for r in range(3)]
    assert lines[0].startswith("round 0 aggregated nothing: 1 update(s) < min_clients 3") and lines[1:] == [None, None]
    assert coverage.report(0.9)["rounds_without_aggregation"] == [0, 1, 2]


def test_every_failure_is_written_but_each_kind_is_said_once():
    sink, said = io.StringIO(), []
    log = FailureLog(sink, said.append)
    for r in range(3):
        log.record(_round(r, [], [], [ClientFailure(c, "train", f"client {c} fails in round {r}") for c in (1, 2)]))
    log.close()
    assert len(sink.getvalue().splitlines()) == 6
    assert json.loads(sink.getvalue().splitlines()[-1]) == {"round": 2, "client_id": 2, "phase": "train",
                                                            "reason": "client 2 fails in round 2"}
    assert len(said) == 2 and said[-1] == "6 failures in train like: client # fails in round #"
