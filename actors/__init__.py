"""Ray actor classes: thin wrappers over ``fgl_ray.runtime``."""
