"""What every graph-specific baseline (issue 31) must do beyond its own tests: run two rounds on both
backends composed with the ``fedia`` aggregator (``mean`` is covered for every algorithm in
``tests/runtime/test_federation.py``), resume exactly (``tests/runtime/test_checkpoint.py``), and
on ``pmlp_gcn`` propagate in training where their authors' backbone does."""

import pytest

from fgl_ray.results import read_metrics
from fgl_ray.runtime import run_experiment

GRAPH_BASELINES = ("adafgl", "fedgta", "fedsage_plus", "fedspa", "fedtad", "fggp", "fgssl")


def _runs_two_rounds_with_the_fedia_aggregator(make_config, tiny_data, algorithm, backend, lender=None):
    result = run_experiment(make_config(algorithm, aggregator="fedia", backend=backend, rounds=2), tiny_data,
                            progress=False, lender=lender)
    frame = read_metrics(result.run_dir)
    assert (frame[frame.metric == "failed"]).empty
    tested = frame[(frame.split == "test") & (frame.metric == "accuracy")]
    assert sorted(tested["round"].unique()) == [0, 1] and tested.value.between(0, 1).all()
    assert frame[frame.split == "cluster"].empty             # personal server models are no clusters


@pytest.mark.parametrize("algorithm", GRAPH_BASELINES)
def test_runs_two_rounds_with_the_fedia_aggregator(make_config, tiny_data, algorithm):
    _runs_two_rounds_with_the_fedia_aggregator(make_config, tiny_data, algorithm, "local")


class TestOnRay:
    """On one class's warm workers, as a Simulator's runs borrow them."""

    @pytest.mark.parametrize("algorithm", GRAPH_BASELINES)
    def test_runs_two_rounds_with_the_fedia_aggregator(self, make_config, tiny_data, warm_workers, algorithm):
        _runs_two_rounds_with_the_fedia_aggregator(make_config, tiny_data, algorithm, "ray", lender=warm_workers)


@pytest.mark.parametrize("algorithm", GRAPH_BASELINES)
def test_pmlp_gcn_propagates_in_training_for_the_methods_whose_authors_trained_a_gnn(make_config, make_context,
                                                                                      algorithm):
    from fgl_ray.algorithms import ALGORITHMS

    if "pmlp_gcn" not in (ALGORITHMS.get(algorithm).models or ("pmlp_gcn",)):
        pytest.skip(f"{algorithm} does not run on pmlp_gcn")
    _, ctx = make_context(make_config(algorithm, model="pmlp_gcn"))
    assert ctx.model.propagate_in_training == (algorithm in {"fggp", "fgssl", "fedtad"})
