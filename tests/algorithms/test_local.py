"""``local``: every client keeps training its own model; the server model never moves."""

from __future__ import annotations

import numpy as np
import torch

from fgl_ray.runtime.client import ClientRuntime

from .conftest import NUM_CLASSES, NUM_FEATURES


def test_each_client_trains_and_is_scored_on_its_own_model_across_rounds(make_config, tiny_data, run_local):
    config = make_config("local", rounds=2)
    backend = run_local(config, tiny_data, 0)
    opening = backend.server.broadcast(0)
    initial = backend.global_weights().clone()
    twins = {g.client_id: ClientRuntime(g, config, NUM_FEATURES, NUM_CLASSES) for g in tiny_data.clients}
    for round_index in range(2):
        result = backend.run_round(round_index)
        assert result.evaluations and not result.failures
        # a twin of each client trained alone on the opening broadcast, round after round, never evaluated
        for twin in twins.values():
            twin.train(opening if round_index == 0 else backend.server.broadcast(round_index))
        held = backend.client_weights()                     # after the round's evaluation
        for evaluation in result.evaluations:
            cid = evaluation.client_id
            torch.testing.assert_close(held[cid], twins[cid].weights(), rtol=0, atol=0)
            assert not torch.equal(held[cid], initial)      # the score is of the trained model, not the initial one
            twin = twins[cid]
            expected = twin.task.evaluate(lambda batch: twin.algorithm.predict(twin.ctx, batch), twin.ctx.data,
                                          NUM_CLASSES)
            for split, stats in expected.items():
                np.testing.assert_array_equal(evaluation.stats[split]["confusion"], stats["confusion"])
    assert torch.equal(backend.global_weights(), initial)  # nothing is shared
    assert not torch.equal(held[0], held[1])
