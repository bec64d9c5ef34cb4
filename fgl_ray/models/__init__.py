"""Backbones, registered by name. Every model splits into ``encode`` and ``classify``."""

from fgl_ray.models.base import MODELS, GraphModel, build_model, check_model_options
from fgl_ray.models import acm, gcn, gin, mlp, multimodal, pmlp, sage  # noqa: F401  (registration)

__all__ = ["MODELS", "GraphModel", "build_model", "check_model_options"]
