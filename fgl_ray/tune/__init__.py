"""Sensitivity grids with Ray Tune: grid YAML -> validated points -> one Tune trial per federation.

``grid`` and ``resources`` are pure (no Ray); ``runner`` holds the Tuner and the trainable;
``tables``, ``plots`` and ``report`` read and draw stored results without Ray.
"""

from fgl_ray.tune.grid import Axis, Grid, GridError, GridPoint, MetricSpec, build_grid, load_grid
from fgl_ray.tune.resources import auto_cpus_per_trial, trial_bundles, trial_plan

__all__ = ["Axis", "Grid", "GridError", "GridPoint", "MetricSpec", "auto_cpus_per_trial", "build_grid",
           "load_grid", "trial_bundles", "trial_plan"]
