import pytest

from fgl_ray.config import load_config
from fgl_ray.data import build_federated_data

TINY = dict(
    dataset="synthetic",
    synthetic={"num_domains": 3, "nodes_per_domain": 90, "num_features": 8, "num_classes": 3},
    clients_per_domain=1, hidden=16, rounds=2, local_epochs=2, torch_threads=1,
)


@pytest.fixture
def tiny_config(tmp_path):
    """A 3-client synthetic federation that runs in well under a second per round."""
    def make(**changes):
        return load_config(TINY | {"output_dir": tmp_path} | changes)
    return make


@pytest.fixture(scope="session")
def tiny_data():
    return build_federated_data(load_config(TINY))


TINY_GRAPHS = dict(dataset="synthetic-graphs", num_clients=3, hidden=16, num_layers=2, rounds=2, torch_threads=1)


@pytest.fixture
def tiny_graph_config(tmp_path):
    """A 3-client graph-classification federation on the generated graph set."""
    def make(**changes):
        return load_config(TINY_GRAPHS | {"output_dir": tmp_path} | changes)
    return make


@pytest.fixture(scope="session")
def tiny_graph_data():
    return build_federated_data(load_config(TINY_GRAPHS))


TINY_MULTIMODAL = dict(dataset="synthetic-mm", num_clients=3, hidden=16, rounds=2, local_epochs=1, torch_threads=1,
                       missing="node:0.5", synthetic={"num_nodes": 240})


@pytest.fixture
def tiny_multimodal_config(tmp_path):
    """A 3-client multimodal federation (half the nodes miss one modality) for the cross-modal tasks."""
    def make(**changes):
        return load_config(TINY_MULTIMODAL | {"output_dir": tmp_path} | changes)
    return make


@pytest.fixture(scope="session")
def tiny_multimodal_data():
    return build_federated_data(load_config(TINY_MULTIMODAL))
