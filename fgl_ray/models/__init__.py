"""Backbones, registered by name. Every model splits into ``encode`` and ``classify``."""

from fgl_ray.models.base import MODELS, GraphModel, build_model
from fgl_ray.models import gcn, mlp  # noqa: F401  (registration)

__all__ = ["MODELS", "GraphModel", "build_model"]
