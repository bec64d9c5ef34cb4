import math

import pytest
import torch

from fgl_ray.messages import ClientUpdate, PayloadError, check_update


def _update(**changes):
    values = dict(client_id=1, model_key="global", num_samples=5, update=torch.zeros(10), buffers=torch.zeros(0),
                  stats={"protos": torch.zeros(3, 4)})
    values.update(changes)
    return ClientUpdate(**values)


def test_a_conforming_update_passes():
    check_update(_update(), 10, 0, {"protos": (3, 4)})


@pytest.mark.parametrize("changes, needle", [
    ({"update": torch.zeros(9)}, "update has shape"),
    ({"buffers": torch.zeros(2)}, "buffers have shape"),
    ({"update": torch.full((10,), math.nan)}, "NaN"),
    ({"stats": {"embeddings": torch.zeros(3, 4)}}, "undeclared"),
    ({"stats": {"protos": torch.zeros(57, 4)}}, "node counts"),
    ({"num_samples": -1}, "negative"),
])
def test_bad_payloads_are_rejected_with_the_reason(changes, needle):
    with pytest.raises(PayloadError, match=needle):
        check_update(_update(**changes), 10, 0, {"protos": (3, 4)})
