"""fgl-ray: a Ray-distributed simulation service for federated graph learning."""

__version__ = "0.1.0"
