"""The federation loop and its backends (in-process and Ray)."""

from fgl_ray.runtime.federation import RunResult, open_backend, run_experiment

__all__ = ["RunResult", "open_backend", "run_experiment"]
