"""``fgl-ray list NAME``: what an algorithm, aggregator or model is and the options it takes, with
their types, defaults and descriptions, read from the same declarations the config validates."""

from __future__ import annotations

import inspect
import sys
import types
import typing

from fgl_ray.config import ConfigError
from fgl_ray.registry import did_you_mean


def describe(name: str) -> str:
    """Every registered algorithm, aggregator or model called ``name``, described; raises
    ``ConfigError`` naming the closest name when there is none."""
    from fgl_ray.aggregators import AGGREGATORS
    from fgl_ray.algorithms import ALGORITHMS
    from fgl_ray.models import MODELS

    kinds = (("algorithm", ALGORITHMS, "--algorithm-options"), ("aggregator", AGGREGATORS, "--aggregator-options"),
             ("model", MODELS, "--model-options"))
    found = [_one(kind, name, registry.get(name), flag) for kind, registry, flag in kinds if name in registry.names()]
    if not found:
        every = sorted(n for _, registry, _ in kinds for n in registry.names())
        raise ConfigError(f"no algorithm, aggregator or model is called {name!r}{did_you_mean(name, every)}; "
                          "`fgl-ray list` names them all")
    return "\n\n".join(found)


def _one(kind: str, name: str, cls: type, flag: str) -> str:
    lines = [f"{kind} {name}: {_first_paragraph(sys.modules[cls.__module__].__doc__)}",
             f"  {_first_paragraph(inspect.getdoc(cls))}"]
    if getattr(cls, "tasks", None):
        lines.append(f"  tasks: {', '.join(cls.tasks)}")
    for model, options in getattr(cls, "model_defaults", {}).items():
        settings = ", ".join(f"{key}: {value!r}" for key, value in options.items())
        lines.append(f"  on {model} it sets {settings} (unless --model-options says otherwise)")
    options = _options(cls) if kind != "model" else _model_options(name, cls)
    if options:
        lines.append(f"  options ({flag} \"{{name: value, ...}}\"):")
        lines += [f"    {option}" for option in options]
    else:
        lines.append("  options: none")
    return "\n".join(lines)


def _options(cls: type) -> list[str]:
    """``name: type = default  description`` for each field of a pydantic ``Options``."""
    return [f"{field}: {_type_name(info.annotation)} = {info.default!r}" + (f"  {info.description}" if
                                                                              info.description else "")
            for field, info in cls.Options.model_fields.items()]


def _model_options(name: str, cls: type) -> list[str]:
    """``name: type = default`` for each keyword a backbone takes beyond the common ones."""
    from fgl_ray.models.base import model_options

    hints, parameters = typing.get_type_hints(cls.__init__), inspect.signature(cls.__init__).parameters
    return [f"{option}: {_type_name(hints.get(option))} = {parameters[option].default!r}"
            for option in model_options(name)]


def _type_name(hint) -> str:
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is typing.Literal:
        return " | ".join(map(repr, args))
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in args)
    if hint is type(None):
        return "None"
    if origin is not None:
        return str(hint).replace("typing.", "")
    return getattr(hint, "__name__", str(hint))


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").strip().split("\n\n")[0].split())
