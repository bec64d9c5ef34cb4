"""fedavg_fill: the broadcast fill is the pooled mean of the observed inputs, and it fills the missing blocks."""

import pytest
import torch

from fgl_ray.config import load_config
from fgl_ray.data import build_federated_data
from fgl_ray.data.multimodal import pack, unpack
from fgl_ray.runtime import open_backend


@pytest.fixture(scope="module")
def federation():
    config = load_config({"dataset": "synthetic-mm", "algorithm": "fedavg_fill", "num_clients": 4, "hidden": 16,
                          "local_epochs": 1, "rounds": 1, "missing": "client:0.5", "backend": "local",
                          "torch_threads": 1, "synthetic": {"num_nodes": 240}})
    data = build_federated_data(config)
    backend = open_backend(config, data)
    backend.run_round(0)
    return backend, data


def _pooled_means(data, dims):
    """Each modality's mean over every client's observed rows, straight from the partition."""
    parts = [unpack(g.data.x, dims) for g in data.clients]           # (visual, text, available) each
    return torch.cat([torch.cat([p[m][p[2][:, m]] for p in parts]).mean(0) for m in range(2)])


def test_the_fill_is_the_pooled_mean_of_observed_rows_and_reaches_clients_without_the_modality(federation):
    backend, data = federation
    dims = tuple(backend.server.config.model_options["modality_dims"])
    fill = backend.server.broadcast(1).stats["fill"]
    torch.testing.assert_close(fill, _pooled_means(data, dims))
    lacking = [g for g in data.clients if not unpack(g.data.x, dims)[2].all(0).all()]
    assert lacking, "client-level missingness at 0.5 leaves some client without a modality"
    missing = int((~unpack(lacking[0].data.x, dims)[2].all(0)).nonzero()[0])
    block = fill.split(dims)[missing]
    assert bool(block.abs().sum() > 0)                  # the values come from the clients that observe it


def test_missing_blocks_take_the_fill_values(federation):
    backend, data = federation
    client = backend.host.clients[data.clients[0].client_id]
    model = client.ctx.model.eval()
    dims = model.modality_dims
    x = client.ctx.data.x
    visual, text, available = unpack(x, dims)
    available = available.clone()
    available[::3, 1] = False                           # drop some text rows by hand
    x = pack(visual, text * available[:, 1:], available)
    fill = torch.randn(sum(dims))
    by_hand = pack(torch.where(available[:, :1], visual, fill[:dims[0]]),
                   torch.where(available[:, 1:], text, fill[dims[0]:]), available)
    with torch.no_grad():
        model.fill_values = None
        expected = model.encode(by_hand, client.ctx.data.edge_index)   # zero fill: the block enters as given
        model.fill_values = fill
        got = model.encode(x, client.ctx.data.edge_index)
        model.fill_values = None
        zero_filled = model.encode(x, client.ctx.data.edge_index)
    torch.testing.assert_close(got, expected)
    assert not torch.allclose(got, zero_filled)           # the negative control: without them, zeros enter
