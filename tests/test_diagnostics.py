import math

import torch

from fgl_ray.diagnostics import mean_off_diagonal, random_overlap_reference, round_diagnostics, top_fraction_indices


def test_jaccard_of_top_supports_by_hand():
    # 3 clients, 10 coordinates, top 20% = 2 coordinates each.
    updates = torch.zeros(3, 10)
    updates[0, [0, 1]] = torch.tensor([5.0, -4.0])   # support {0, 1}
    updates[1, [1, 2]] = torch.tensor([3.0, 6.0])    # support {1, 2}
    updates[2, [7, 8]] = torch.tensor([-1.0, 2.0])   # support {7, 8}
    overlap = round_diagnostics(updates, torch.ones(3) / 3, 0.2)["overlap"]
    expected = torch.tensor([[1, 1 / 3, 0], [1 / 3, 1, 0], [0, 0, 1]], dtype=torch.float64)
    torch.testing.assert_close(overlap, expected)
    assert math.isclose(mean_off_diagonal(overlap), (2 / 3) / 6)


def test_supports_keep_ceil_fraction_and_random_reference_matches_simulation():
    generator = torch.Generator().manual_seed(0)
    updates = torch.randn(40, 2000, generator=generator)
    assert top_fraction_indices(updates, 0.05).shape == (40, 100)
    simulated = mean_off_diagonal(round_diagnostics(updates, torch.ones(40) / 40, 0.05)["overlap"])
    assert abs(simulated - random_overlap_reference(0.05)) < 0.005
    assert math.isclose(random_overlap_reference(0.05), 0.05 / 1.95)


def test_cosines_signs_and_aggregate_projection():
    updates = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])
    found = round_diagnostics(updates, torch.tensor([0.5, 0.5, 0.0]), 0.5)
    cosine = found["pairwise_cosine"]
    assert cosine[0, 2] == -1 and cosine[0, 1] == 0 and cosine[1, 1] == 1
    torch.testing.assert_close(found["cosine_to_aggregate"], torch.tensor([1, 1, -1], dtype=torch.float64) / math.sqrt(2))


def test_active_share_by_hand():
    # 3 clients, 10 coordinates, top 20% = 2 coordinates each; weights 0.5 / 0.3 / 0.2
    updates = torch.zeros(3, 10)
    updates[0, [0, 1]] = torch.tensor([5.0, -4.0])   # support {0, 1}
    updates[1, [1, 2]] = torch.tensor([-2.0, 6.0])   # support {1, 2}
    updates[2, [7, 8]] = torch.tensor([-1.0, 2.0])   # support {7, 8}
    q = torch.tensor([0.5, 0.3, 0.2])
    found = round_diagnostics(updates, q, 0.2)
    # r: coord 0 -> 0.5, coord 1 -> 0.8, coord 2 -> 0.3, coords 7/8 -> 0.2
    expected_share = torch.tensor([(0.5 + 0.8) / 2, (0.8 + 0.3) / 2, 0.2], dtype=torch.float64)
    torch.testing.assert_close(found["active_share"], expected_share)
    # active-client means: coord 0 = 5, coord 1 = (0.5*-4 + 0.3*-2)/0.8, coord 2 = 6, coords 7/8 = -1, 2
    mu1 = abs((0.5 * -4 + 0.3 * -2) / 0.8)
    torch.testing.assert_close(found["active_mean_abs"],
                               torch.tensor([(5 + mu1) / 2, (mu1 + 6) / 2, 1.5], dtype=torch.float64))
    # the ordinary aggregate is diluted by exactly the share on every coordinate here: ubar_d = r_d mu_d
    ubar = (q[:, None].double() * updates.double()).sum(0).abs()
    torch.testing.assert_close(found["aggregate_abs"],
                               torch.stack([ubar[[0, 1]].mean(), ubar[[1, 2]].mean(), ubar[[7, 8]].mean()]))


def test_shared_supports_and_gram_equal_the_dense_definitions_on_random_updates():
    generator = torch.Generator().manual_seed(3)
    updates = torch.randn(7, 5000, generator=generator) * torch.rand(7, 1, generator=generator)
    q = torch.rand(7, generator=generator, dtype=torch.float64)
    q[2] = 0.0                                          # a client without weight: its own coordinates get r = 0
    q /= q.sum()
    found = round_diagnostics(updates, q, 0.05)

    masks = torch.zeros(updates.shape, dtype=torch.float64)
    masks.scatter_(1, updates.abs().topk(250, dim=1).indices, 1.0)
    u, per_client = updates.double(), masks / masks.sum(dim=1, keepdim=True)
    intersection = masks @ masks.T
    torch.testing.assert_close(found["overlap"], intersection / (500 - intersection))
    unit = torch.nn.functional.normalize(u, dim=1)
    torch.testing.assert_close(found["pairwise_cosine"], unit @ unit.T)
    torch.testing.assert_close(found["cosine_to_aggregate"],
                               torch.nn.functional.cosine_similarity(u, (q @ u)[None, :], dim=1))
    share = q @ masks
    active = torch.where(share > 0, (q[:, None] * masks * u).sum(0) / share.clamp(min=1e-300), 0.0)
    torch.testing.assert_close(found["active_share"], per_client @ share)
    torch.testing.assert_close(found["active_mean_abs"], per_client @ active.abs())
    torch.testing.assert_close(found["aggregate_abs"], per_client @ (q @ u).abs())


def test_fedia_records_diagnostic_rows_per_domain_and_the_aggregation_weights(tmp_path):
    from fgl_ray.config import load_config
    from fgl_ray.results import read_metrics
    from fgl_ray.runtime import run_experiment

    config = load_config(dict(dataset="synthetic", clients_per_domain=2, hidden=8, rounds=2, local_epochs=1,
                              torch_threads=1, backend="local", output_dir=tmp_path, diagnostics=True,
                              aggregator="fedia",
                              synthetic={"num_domains": 2, "nodes_per_domain": 60, "num_features": 6}))
    metrics = read_metrics(run_experiment(config, progress=False).run_dir)
    domains = metrics[(metrics.client_id == "server") & (metrics.metric == "active_share")]
    assert sorted(domains.domain.unique()) == ["syn-0", "syn-1"] and domains.value.between(0, 1).all()
    weights = metrics[(metrics.split == "aggregation") & (metrics.metric == "client_weight")]
    assert weights.groupby("round").value.sum().round(9).eq(1.0).all()          # FedIA's alpha sums to 1
    top = metrics[metrics.metric == "max_client_weight"].set_index("round").value
    assert (top == weights.groupby("round").value.max()).all()
