import pytest
import torch

from fgl_ray.algorithms import ALGORITHMS
from fgl_ray.algorithms.fedproc import annealed_alpha
from fgl_ray.algorithms.prototypes import prototype_contrastive_loss
from fgl_ray.config import ConfigError

NUM_CLASSES, HIDDEN = 3, 8


def test_defaults_and_validation(make_config):
    options = ALGORITHMS.get("fedproc").Options()
    assert (options.temperature, options.weight, options.anneal_rounds, options.constant_alpha) == (0.5, 1.0, None, None)
    with pytest.raises(ConfigError, match="constant_alpha"):
        make_config("fedproc", algorithm_options={"constant_alpha": 1.5})


def test_contrastive_loss_matches_its_definition_and_skips_absent_classes():
    torch.manual_seed(0)
    z, prototypes = torch.randn(6, 4), torch.randn(4, 4)
    y = torch.tensor([0, 2, 3, 0, 2, 3])
    present = torch.tensor([True, False, True, True])
    tau = 0.5
    terms = []
    for zi, yi in zip(z, y):
        sims = {c: torch.dot(zi, prototypes[c]) / (zi.norm() * prototypes[c].norm()) / tau
                for c in range(4) if present[c]}
        terms.append(-(sims[int(yi)] - torch.logsumexp(torch.stack(list(sims.values())), 0)))
    expected = torch.stack(terms).mean()
    torch.testing.assert_close(prototype_contrastive_loss(z, y, prototypes, present, tau), expected)


def test_alpha_anneals_from_one_to_zero():
    total = 4
    assert [annealed_alpha(t, total) for t in range(total + 2)] == [1 - t / total for t in range(total + 1)] + [0.0]


def test_without_global_prototypes_the_loss_is_cross_entropy(anchor_case, broadcast_of):
    case = anchor_case("fedproc")
    proc, ctx = case.algorithm, case.ctx
    proc.receive(ctx, broadcast_of(ctx.model, round_index=2))
    z, logits = case.forward()
    for stats in ({}, {"prototypes": torch.randn(NUM_CLASSES, HIDDEN),
                       "present": torch.zeros(NUM_CLASSES, dtype=torch.bool)}):
        ctx.server_stats = stats
        case.assert_vanishes(proc.objective(ctx, ctx.data, z, logits), logits)


@pytest.mark.parametrize("options", [{}, {"constant_alpha": 0.3, "weight": 2.0}, {"anneal_rounds": 8}])
def test_loss_mixes_contrastive_and_cross_entropy(anchor_case, broadcast_of, options):
    case = anchor_case("fedproc", algorithm_options=options, rounds=4)
    proc, ctx = case.algorithm, case.ctx
    prototypes, present = torch.randn(NUM_CLASSES, HIDDEN), torch.tensor([True, True, False])
    proc.receive(ctx, broadcast_of(ctx.model, round_index=1, stats={"prototypes": prototypes, "present": present}))
    z, logits = case.forward()
    nodes = ctx.data.train_mask & present[ctx.data.y]
    pc = prototype_contrastive_loss(z[nodes], ctx.data.y[nodes], prototypes, present, 0.5)
    alpha = options.get("constant_alpha", 1 - 1 / options.get("anneal_rounds", 4))
    expected = alpha * options.get("weight", 1.0) * pc + (1 - alpha) * case.plain_loss(logits)
    torch.testing.assert_close(proc.objective(ctx, ctx.data, z, logits), expected)


def test_round_index_and_prototypes_carry_across_rounds(make_config, tiny_data, run_local, fedavg_after):
    proc = run_local(make_config("fedproc"), tiny_data, rounds=1)
    assert torch.equal(proc.global_weights(), fedavg_after(1).global_weights())   # round 0: no prototypes, plain CE
    assert proc.server.algorithm.present.all()
    first = proc.server.algorithm.prototypes.clone()
    proc.run_round(1)
    assert not torch.equal(proc.server.algorithm.prototypes, first)
    for client in proc.host.clients.values():
        assert client.ctx.state["fedproc_round"] == 2                    # set by the last receive (evaluation)
        assert client.ctx.server_stats["present"].all()
    assert proc.server.declared == {"prototypes": (NUM_CLASSES, HIDDEN), "counts": (NUM_CLASSES,)}


@pytest.mark.parametrize("algorithm", ["fedproto", "fedproc"])
def test_prototype_methods_run_on_pmlp_and_compose_with_fedia(make_config, tiny_data, run_local, algorithm):
    backend = run_local(make_config(algorithm, model="pmlp_gcn", aggregator="fedia"), tiny_data, rounds=2)
    assert backend.server.algorithm.present.all()
