"""The server's round logic against a scripted client pool (no clients, no data, no Ray):
payload checks, the ``min_clients`` boundary, client sampling, the evaluation schedule,
evaluation failures, and the averaging of buffers."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import torch

from fgl_ray.messages import GLOBAL, ClientEvaluation, ClientFailure, ClientUpdate, ModelState
from fgl_ray.runtime.server import ServerRuntime

NUM_FEATURES, NUM_CLASSES = 8, 3                      # the tiny_config federation's sizes


class ScriptedPool:
    """Answers every requested client with a made-up update (or what ``train_answers`` says) and
    records which clients each phase asked for."""

    def __init__(self, train_answers=None, evaluate_answers=None):
        self.train_answers, self.evaluate_answers = train_answers, evaluate_answers
        self.trained: dict[int, list[int]] = {}
        self.evaluated: dict[int, list[int]] = {}

    def update(self, broadcast, client_id: int) -> ClientUpdate:
        gen = torch.Generator().manual_seed(1000 * broadcast.round + client_id)
        state = broadcast.model_for(client_id)
        return ClientUpdate(client_id=client_id, model_key=broadcast.model_key(client_id), num_samples=client_id + 1,
                            update=torch.randn(state.params.numel(), generator=gen),
                            buffers=torch.randn(state.buffers.numel(), generator=gen))

    def train(self, broadcast, client_ids, timeout_s):
        self.trained[broadcast.round] = list(client_ids)
        if self.train_answers is not None:
            return self.train_answers(self, broadcast, client_ids)
        return [self.update(broadcast, cid) for cid in client_ids]

    def evaluate(self, broadcast, client_ids, timeout_s):
        self.evaluated[broadcast.round - 1] = list(client_ids)      # the broadcast after round t opens t + 1
        if self.evaluate_answers is not None:
            return self.evaluate_answers(client_ids)
        return [ClientEvaluation(cid, {}) for cid in client_ids]


def make_server(config, pool, clients=(0, 1, 2)) -> ServerRuntime:
    return ServerRuntime(config, pool, list(clients), NUM_FEATURES, NUM_CLASSES)


def mean_step(server, before, updates):
    """``W - lr * sum_k (n_k / n) u_k`` over ``updates`` (the mean aggregator's rule)."""
    counts = torch.tensor([float(u.num_samples) for u in updates], dtype=torch.float64)
    stacked = torch.stack([u.update for u in updates]).double()
    return before.double() - server.config.lr * (counts / counts.sum()) @ stacked


# ---------------------------------------------------------------------------- bad payloads
def _bad(kind: str, update: ClientUpdate) -> ClientUpdate:
    if kind == "shape":
        return replace(update, update=update.update[:-1])
    if kind == "nan":
        return replace(update, update=torch.full_like(update.update, float("nan")))
    if kind == "model_key":
        return replace(update, model_key="cluster-9")
    if kind == "undeclared_stat":
        return replace(update, stats={"prototypes": torch.zeros(NUM_CLASSES, 4)})
    if kind == "buffers":
        return replace(update, buffers=torch.zeros(5))
    assert kind == "negative_samples"
    return replace(update, num_samples=-1)


@pytest.mark.parametrize("kind", ["shape", "nan", "model_key", "undeclared_stat", "buffers", "negative_samples"])
def test_a_bad_payload_becomes_a_recorded_failure_and_never_reaches_the_model(tiny_config, kind):
    def answers(pool, broadcast, client_ids):
        good = [pool.update(broadcast, cid) for cid in client_ids]
        good[1] = _bad(kind, good[1])
        return good

    pool = ScriptedPool(train_answers=answers)
    server = make_server(tiny_config(backend="local"), pool)
    before = server.global_weights().clone()
    opening = server.broadcast(0)
    result = server.run_round(0)
    assert [(f.client_id, f.phase) for f in result.failures] == [(1, "payload")]
    assert sorted(result.updates) == [0, 2] and result.aggregated
    clean = [pool.update(opening, cid) for cid in (0, 2)]                  # the two good updates alone
    torch.testing.assert_close(server.global_weights().double(), mean_step(server, before, clean))


# ---------------------------------------------------------------------------- min_clients
@pytest.mark.parametrize("min_clients, aggregates", [(2, True), (3, False)])
def test_a_round_aggregates_with_exactly_min_clients_updates_and_not_with_fewer(tiny_config, min_clients, aggregates):
    def two_of_three(pool, broadcast, client_ids):
        return [pool.update(broadcast, 0), ClientFailure(1, "train", "boom"), pool.update(broadcast, 2)]

    server = make_server(tiny_config(backend="local", min_clients=min_clients), ScriptedPool(two_of_three))
    before = server.global_weights().clone()
    result = server.run_round(0)
    assert len(result.updates) == 2
    assert result.aggregated is aggregates
    assert torch.equal(server.global_weights(), before) is not aggregates


# ---------------------------------------------------------------------------- client sampling
@pytest.mark.parametrize("fraction, count", [(0.5, 3), (0.3, 2), (0.01, 1)])   # nearest whole client, at least 1
def test_fraction_fit_samples_that_many_distinct_clients_and_only_they_train(tiny_config, fraction, count):
    rounds, clients = 12, list(range(6))
    pool = ScriptedPool()
    server = make_server(tiny_config(backend="local", fraction_fit=fraction, rounds=rounds), pool, clients)
    drawn = []
    for t in range(rounds):
        result = server.run_round(t)
        assert result.selected == pool.trained[t] == sorted(result.updates)     # exactly the sampled clients train
        assert len(set(result.selected)) == len(result.selected) == count
        assert result.selected == sorted(result.selected) and set(result.selected) <= set(clients)
        assert pool.evaluated[t] == clients                                     # every client is evaluated
        drawn.append(tuple(result.selected))
    assert len(set(drawn)) > 1, "the sample must change between rounds"
    assert {c for sample in drawn for c in sample} == set(clients) or count == 1
    again = make_server(tiny_config(backend="local", fraction_fit=fraction, rounds=rounds), ScriptedPool(), clients)
    assert [tuple(again.run_round(t).selected) for t in range(rounds)] == drawn  # the seed fixes the samples


def test_other_seeds_draw_other_samples(tiny_config):
    samples = []
    for seed in (0, 1):
        server = make_server(tiny_config(backend="local", fraction_fit=0.5, seed=seed), ScriptedPool(), range(6))
        samples.append([tuple(server.algorithm.select(server, t, server.rng)) for t in range(8)])
    assert samples[0] != samples[1]


# ---------------------------------------------------------------------------- evaluation schedule
def test_eval_every_evaluates_every_kth_round_and_the_last(tiny_config):
    # 7 rounds, every 3rd: the 3rd and 6th rounds (indices 2 and 5), and the last (index 6)
    pool = ScriptedPool()
    server = make_server(tiny_config(backend="local", rounds=7, eval_every=3), pool)
    evaluated = [t for t in range(7) if server.run_round(t).evaluations]
    assert evaluated == sorted(pool.evaluated) == [2, 5, 6]


def test_a_client_failing_evaluation_is_a_recorded_failure_and_the_others_are_scored(tiny_config):
    def one_fails(client_ids):
        return [ClientFailure(c, "evaluate", "boom") if c == 1 else ClientEvaluation(c, {}) for c in client_ids]

    server = make_server(tiny_config(backend="local"), ScriptedPool(evaluate_answers=one_fails))
    result = server.run_round(0)
    assert [e.client_id for e in result.evaluations] == [0, 2]
    assert [(f.client_id, f.phase) for f in result.failures] == [(1, "evaluate")]


# ---------------------------------------------------------------------------- buffers
def test_buffers_are_the_sample_weighted_mean_of_the_clients_buffers(tiny_config):
    """No registered backbone keeps float buffers, so the server's model is given four here: the
    aggregation is model-agnostic, ``sum_k n_k b_k / sum_k n_k`` over the accepted updates."""
    def with_a_bad_one(pool, broadcast, client_ids):
        answers = [pool.update(broadcast, cid) for cid in client_ids]
        answers[2] = _bad("nan", answers[2])                                  # its buffers must not count
        return answers

    pool = ScriptedPool(with_a_bad_one)
    server = make_server(tiny_config(backend="local"), pool)
    state = server.models[GLOBAL]
    server.models[GLOBAL] = ModelState(state.params, torch.tensor([1.0, -2.0, 3.0, 0.5]))
    server._broadcast = None
    opening = server.broadcast(0)
    result = server.run_round(0)
    assert sorted(result.updates) == [0, 1]
    sent = [pool.update(opening, cid) for cid in (0, 1)]
    n = np.array([u.num_samples for u in sent], dtype=np.float64)
    expected = sum(w * u.buffers.double() for w, u in zip(n / n.sum(), sent))
    assert not torch.allclose(sent[0].buffers, sent[1].buffers)
    torch.testing.assert_close(server.models[GLOBAL].buffers.double(), expected)
    assert torch.equal(server.broadcast(1).models[GLOBAL].buffers, server.models[GLOBAL].buffers)
