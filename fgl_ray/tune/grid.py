"""Grid YAML -> validated grid points (pure: no Ray).

A grid file names a base experiment and the axes to sweep::

    name: fedia-rho-beta             # optional; default: the file's stem
    base:                            # any ExperimentConfig fields (or base_config: exp.yaml)
      preset: twitch-S1
      aggregator: fedia
    axes:                            # dotted paths into the config; the product is the grid
      aggregator_options.rho: [0.1, 0.5, 0.9]                  # a list
      aggregator_options.beta: {start: 0.1, stop: 0.9, step: 0.2}  # an inclusive range
      # {start: 0, stop: 1, num: 5} (evenly spaced, ends included) and {values: [...]} also work
    baseline: {aggregator: mean}     # overrides of base for the reference run; null: none
    metric: {name: accuracy, domain: avg_over_domains}   # or just `accuracy`
    heatmap: {x: aggregator_options.rho, y: aggregator_options.beta}   # default: first two axes
    cpus_per_trial: auto             # or a number: CPUs of one trial's placement group
    gpus_per_trial: 0
    max_concurrent_trials: null      # default: as many as the cluster's resources fit
    max_failures: 0                  # retries of a failed trial (a lost node): it resumes from its checkpoint
    output_dir: results/tune/<name>

Axes other than the two heatmap axes are *facets*: one heatmap is drawn per facet value and the
baseline runs once per facet value (with that value applied). Every point is built into an
:class:`~fgl_ray.config.ExperimentConfig` here, so a bad value fails naming its point before
any Ray process starts.
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
import math
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Sequence, Union

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from fgl_ray.config import (ConfigError, ExperimentConfig, load_config, read_yaml_mapping, validation_lines,
                            yaml_problem)
from fgl_ray.errors import as_folder_name, file_problem, folder_name, output_folder, output_problem

#: Fields the grid runner sets for every trial (each trial writes ``<grid>/runs/<point id>``).
MANAGED_FIELDS = ("output_dir", "run_name")

#: Fields that decide a trial's client partitions (``build_federated_data`` reads only these).
DATA_FIELDS = ("dataset", "data_dir", "partition", "num_clients", "clients_per_domain", "domain_ratios",
               "dirichlet_alpha", "split", "split_mode", "features", "feature_dim", "data_seed", "synthetic",
               "imbalance_ratio", "max_graphs", "max_nodes", "missing")

#: Summary keys a metric may be taken over besides a domain name.
AVG_OVER_DOMAINS = "avg_over_domains"
POOLED = "all"

DEFAULT_BASELINE: dict[str, Any] = {"aggregator": "mean"}

#: A baseline override of a name resets that name's options (``aggregator: mean`` drops ``rho``).
_OPTION_FIELDS = {"aggregator": "aggregator_options", "algorithm": "algorithm_options", "model": "model_options"}
_MAX_LISTED_ERRORS = 10


class GridError(ConfigError):
    """A grid file that cannot run; the message names the key, the point or the fix."""


#: The most values one axis, and the most points a whole grid, may hold (each point is a federation).
MAX_AXIS_VALUES = 1000
MAX_POINTS = 10_000


# ---------------------------------------------------------------------------------- file schema
class RangeSpec(BaseModel):
    """``{start, stop, step}`` (stop included when on the step) or ``{start, stop, num}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    start: float
    stop: float
    step: Optional[float] = None
    num: Optional[int] = None

    def expand(self, limit: int | None = None) -> list[float | int]:
        """The range's values, the first ``limit`` of them when given."""
        if (self.step is None) == (self.num is None):
            raise ValueError("a range needs exactly one of step or num")
        if self.stop < self.start:
            raise ValueError(f"a range needs stop >= start, got start {self.start} and stop {self.stop}")
        if self.num is not None:
            if not 1 <= min(self.num, limit or self.num) <= MAX_AXIS_VALUES:
                raise ValueError(f"num must be in 1..{MAX_AXIS_VALUES}, got {self.num}")
            if self.num == 1:
                return [_tidy(self.start, 12)]
            width = (self.stop - self.start) / (self.num - 1)
            return [_tidy(self.start + i * width, 12) for i in range(min(self.num, limit or self.num))]
        if self.step <= 0:
            raise ValueError(f"step must be > 0, got {self.step}")
        count = math.floor((self.stop - self.start) / self.step + 1e-9) + 1
        count = min(count, limit) if limit else count
        if count > MAX_AXIS_VALUES:
            raise ValueError(f"the range gives {count:,} values; at most {MAX_AXIS_VALUES} per axis (each value is a "
                             "federation per combination of the other axes); widen the step")
        digits = max(_decimals(self.start), _decimals(self.step))
        return [_tidy(self.start + i * self.step, digits) for i in range(count)]


class ValuesSpec(BaseModel):
    """``{values: [...]}``: the explicit form of a list."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    values: list[Any]


class MetricSpec(BaseModel):
    """The figure a grid is judged by: a test metric's last-K mean over ``domain``.

    ``domain`` is ``avg_over_domains`` (FedIA's AVG), ``all`` (pooled) or one domain's name.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = "accuracy"
    domain: str = AVG_OVER_DOMAINS

    @property
    def label(self) -> str:
        return f"test {self.name} ({self.domain}, last-K mean)"


class HeatmapSpec(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    x: str
    y: str


class GridFile(BaseModel):
    """The YAML document as written (validated; see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: Optional[str] = None
    description: Optional[str] = None
    base_config: Optional[Path] = None
    base: dict[str, Any] = Field(default_factory=dict)
    axes: dict[str, Any]
    baseline: Optional[dict[str, Any]] = None
    metric: Union[str, MetricSpec] = MetricSpec()
    heatmap: Optional[HeatmapSpec] = None
    cpus_per_trial: Union[Literal["auto"], float] = "auto"
    gpus_per_trial: float = 0.0
    max_concurrent_trials: Optional[int] = None
    max_failures: int = Field(0, ge=0)
    output_dir: Optional[Path] = None

    @field_validator("cpus_per_trial")
    @classmethod
    def _cpus(cls, value):
        if value != "auto" and value <= 0:
            raise ValueError(f"cpus_per_trial must be 'auto' or > 0, got {value}")
        return value

    @field_validator("gpus_per_trial")
    @classmethod
    def _gpus(cls, value):
        if value < 0:
            raise ValueError(f"gpus_per_trial must be >= 0, got {value}")
        return value

    @field_validator("max_concurrent_trials")
    @classmethod
    def _concurrency(cls, value):
        if value is not None and value < 1:
            raise ValueError(f"max_concurrent_trials must be >= 1 or null, got {value}")
        return value


# ---------------------------------------------------------------------------------- results
@dataclass(frozen=True)
class Axis:
    """One swept config path and its values, in file order."""

    path: str
    values: tuple[Any, ...]

    @property
    def short(self) -> str:
        """The last path component (``rho`` for ``aggregator_options.rho``)."""
        return self.path.rsplit(".", 1)[-1]


@dataclass(frozen=True)
class GridPoint:
    """One trial: its id, the axis values it sets and its validated config."""

    id: str
    axes: dict[str, Any]
    config: ExperimentConfig
    baseline: bool = False

    def __post_init__(self) -> None:
        folder_name(self.id, "grid point id")   # each trial writes <grid>/runs/<point id>

    @property
    def label(self) -> str:
        text = " ".join(f"{path.rsplit('.', 1)[-1]}={_show(v)}" for path, v in self.axes.items())
        return ("baseline " + text).strip() if self.baseline else text

    def digest(self) -> str:
        """A hash of the config without the runner-managed fields (detects edited grids on resume)."""
        values = self.config.model_dump(mode="json", exclude=set(MANAGED_FIELDS))
        return hashlib.sha1(json.dumps(values, sort_keys=True, default=str).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Grid:
    """A validated grid: axes, every point (baselines first), and how to run and judge it."""

    name: str
    axes: tuple[Axis, ...]
    points: tuple[GridPoint, ...]
    metric: MetricSpec
    heatmap: Optional[tuple[str, str]]
    output_dir: Path
    cpus_per_trial: Optional[float] = None
    gpus_per_trial: float = 0.0
    max_concurrent_trials: Optional[int] = None
    max_failures: int = 0
    source: Optional[Path] = None
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def axis_paths(self) -> list[str]:
        return [axis.path for axis in self.axes]

    @property
    def facets(self) -> list[str]:
        """Axes that are not heatmap axes (a heatmap and a baseline per value combination)."""
        shown = set(self.heatmap or ())
        return [axis.path for axis in self.axes if axis.path not in shown] if self.heatmap else []

    @property
    def baselines(self) -> list[GridPoint]:
        return [p for p in self.points if p.baseline]

    @property
    def trials(self) -> list[GridPoint]:
        return [p for p in self.points if not p.baseline]

    def point(self, point_id: str) -> GridPoint:
        for point in self.points:
            if point.id == point_id:
                return point
        raise KeyError(point_id)

    def describe(self) -> dict[str, Any]:
        """JSON-ready facts the report needs without the YAML (stored as ``grid.json``)."""
        return {
            "name": self.name,
            "source": str(self.source) if self.source else None,
            "axes": [{"path": a.path, "values": list(a.values)} for a in self.axes],
            "heatmap": list(self.heatmap) if self.heatmap else None,
            "facets": self.facets,
            "metric": self.metric.model_dump(),
            "points": [{"id": p.id, "axes": p.axes, "baseline": p.baseline, "digest": p.digest()}
                       for p in self.points],
            "cpus_per_trial": self.cpus_per_trial,
            "gpus_per_trial": self.gpus_per_trial,
            "max_concurrent_trials": self.max_concurrent_trials,
            "max_failures": self.max_failures,
        }


# ---------------------------------------------------------------------------------- loading
def load_grid(path: str | Path, set_values: Mapping[str, Any] | None = None, limit: int | None = None,
              output_dir: str | Path | None = None) -> Grid:
    """Reads and validates a grid file; builds the config of every point.

    Args:
        path: the grid YAML.
        set_values: base overrides applied after the file's ``base`` (dotted paths allowed),
            e.g. ``{"rounds": 2}``.
        limit: keep only the first ``limit`` values of every axis (quick checks).
        output_dir: the grid folder; default the file's ``output_dir`` or ``results/tune/<name>``.

    Raises:
        GridError: a malformed file, or every bad point with its axis values and config error.
    """
    path = Path(path)
    if problem := file_problem(path):
        raise GridError(f"grid file {str(path)!r} {problem}")
    try:
        document = yaml.safe_load(path.read_text())
    except yaml.YAMLError as problem:
        raise GridError(f"grid file {str(path)!r} is not valid YAML: {yaml_problem(problem)}") from None
    if not isinstance(document, dict):
        raise GridError(f"grid file {str(path)!r} must hold a mapping with at least base and axes")
    return build_grid(document, name=path.stem, root=path.parent, set_values=set_values, limit=limit,
                      output_dir=output_dir, source=path)


def build_grid(document: Mapping[str, Any], name: str = "grid", root: Path | None = None,
               set_values: Mapping[str, Any] | None = None, limit: int | None = None,
               output_dir: str | Path | None = None, source: Path | None = None) -> Grid:
    """:func:`load_grid` for an already parsed document (``root`` resolves ``base_config``)."""
    try:
        spec = GridFile(**document)
    except ValidationError as error:
        raise GridError(_describe_file_error(error)) from None
    if limit is not None and limit < 1:
        raise GridError(f"limit must be >= 1, got {limit}")
    if spec.base_config is None and not spec.base:
        raise GridError("the grid has no base (nor base_config): name the federation its axes vary, e.g. "
                        "base: {dataset: twitch, aggregator: fedia, rounds: 50}")
    base = _base_values(spec, root)
    for key, value in (set_values or {}).items():
        swept = [path for path in spec.axes if key == path or key.startswith(path + ".")]
        if swept:
            raise GridError(f"--set {key}: {swept[0]} is an axis of this grid, so its values come from axes; drop the "
                            "--set, or move the axis into base")
        _set_path(base, key, value, "override")
    notes = []
    for managed in MANAGED_FIELDS:
        if base.pop(managed, None) is not None:
            notes.append(f"base {managed} ignored: every trial writes <grid folder>/runs/<point id>")
    axes = _axes(spec, limit)
    heatmap = _heatmap(spec, axes)
    metric = MetricSpec(name=spec.metric) if isinstance(spec.metric, str) else spec.metric
    try:
        grid_name = folder_name(spec.name, "the grid's name") if spec.name else as_folder_name(name)
        folder = output_folder(output_dir if output_dir is not None else
                               (spec.output_dir or Path("results") / "tune" / grid_name), "the grid's output_dir")
    except ValueError as problem:
        raise GridError(str(problem)) from None
    if problem := output_problem(folder):
        raise GridError(f"the grid's folder {str(folder)!r} {problem}; choose another with --output or output_dir")
    points = _points(base, axes, heatmap, _baseline(spec))
    _check_metric(metric, points)
    return Grid(
        name=grid_name, axes=axes, points=tuple(points), metric=metric, heatmap=heatmap, output_dir=folder,
        cpus_per_trial=None if spec.cpus_per_trial == "auto" else float(spec.cpus_per_trial),
        gpus_per_trial=spec.gpus_per_trial, max_concurrent_trials=spec.max_concurrent_trials,
        max_failures=spec.max_failures, source=source, notes=tuple(notes),
    )


def _base_values(spec: GridFile, root: Path | None) -> dict[str, Any]:
    base: dict[str, Any] = {}
    if spec.base_config is not None:
        file = spec.base_config if spec.base_config.is_absolute() else (root or Path.cwd()) / spec.base_config
        base.update(read_yaml_mapping(file, "base_config", GridError))
    for key, value in spec.base.items():
        _set_path(base, key, copy.deepcopy(value), "base")
    return base


def _axes(spec: GridFile, limit: int | None) -> tuple[Axis, ...]:
    if not spec.axes:
        raise GridError("axes is empty; name at least one config path to sweep, e.g. aggregator_options.rho: [0.1, 0.9]")
    axes = []
    for path, raw in spec.axes.items():
        _check_path(path, "axis")
        if path.split(".")[0] in MANAGED_FIELDS:
            raise GridError(f"axis {path!r}: {path} is set by the grid runner and cannot be swept")
        values = _axis_values(path, raw, limit)
        if not values:
            raise GridError(f"axis {path!r} has no values")
        keys = [json.dumps(v, sort_keys=True, default=str) for v in values]
        if len(set(keys)) != len(keys):
            raise GridError(f"axis {path!r} repeats a value: {values}")
        axes.append(Axis(path, tuple(values[:limit] if limit else values)))
    points = math.prod(len(axis.values) for axis in axes)
    if points > MAX_POINTS:
        raise GridError(f"the axes make {points:,} grid points; at most {MAX_POINTS:,} (each is a federation); "
                        "sweep fewer values, or split the grid")
    return tuple(axes)


def _axis_values(path: str, raw: Any, limit: int | None) -> list[Any]:
    if isinstance(raw, (list, tuple)):
        return list(raw)
    if not isinstance(raw, dict):
        raise GridError(f"axis {path!r}: give a list of values, {{values: [...]}} or {{start, stop, step}}, got {raw!r} "
                        "(a single fixed value belongs in base)")
    kind = ValuesSpec if "values" in raw else RangeSpec
    try:
        spec = kind(**raw)
        return list(spec.values) if isinstance(spec, ValuesSpec) else spec.expand(limit)
    except ValidationError as error:
        fields = ", ".join(kind.model_fields)
        details = "; ".join(f"{'.'.join(map(str, e['loc'])) or 'range'}: {e['msg']}" for e in error.errors())
        raise GridError(f"axis {path!r}: {details} (keys of this form: {fields}; or {{values: [...]}})") from None
    except ValueError as error:
        raise GridError(f"axis {path!r}: {error}") from None


def _heatmap(spec: GridFile, axes: Sequence[Axis]) -> Optional[tuple[str, str]]:
    paths = [axis.path for axis in axes]
    if spec.heatmap is None:
        return (paths[0], paths[1]) if len(paths) >= 2 else None
    for key, value in (("x", spec.heatmap.x), ("y", spec.heatmap.y)):
        if value not in paths:
            raise GridError(f"heatmap.{key} {value!r} is not an axis; axes: {', '.join(paths)}")
    if spec.heatmap.x == spec.heatmap.y:
        raise GridError(f"heatmap x and y must be different axes, both are {spec.heatmap.x!r}")
    return spec.heatmap.x, spec.heatmap.y


def _baseline(spec: GridFile) -> Optional[dict[str, Any]]:
    if "baseline" not in spec.model_fields_set:
        return dict(DEFAULT_BASELINE)
    return spec.baseline  # None (or an empty mapping) switches the baseline off


def _points(base: dict[str, Any], axes: Sequence[Axis], heatmap: Optional[tuple[str, str]],
            baseline: Optional[dict[str, Any]]) -> list[GridPoint]:
    candidates: list[tuple[str, dict[str, Any], dict[str, Any], bool]] = []
    if baseline:
        for path in baseline:
            _check_path(path, "baseline key")
        facets = [a for a in axes if heatmap and a.path not in heatmap]
        combos = list(itertools.product(*(a.values for a in facets)))
        for index, combo in enumerate(combos):
            values = copy.deepcopy(base)
            chosen = dict(zip((a.path for a in facets), combo))
            for path, value in chosen.items():
                _set_path(values, path, value, "axis")
            for name, options in _OPTION_FIELDS.items():
                if name in baseline and options not in baseline:
                    values.pop(options, None)
            for path, value in baseline.items():
                _set_path(values, path, copy.deepcopy(value), "baseline")
            point_id = "baseline" if len(combos) == 1 else f"baseline-{index:02d}"
            candidates.append((point_id, chosen, values, True))
    for index, combo in enumerate(itertools.product(*(a.values for a in axes))):
        values = copy.deepcopy(base)
        chosen = dict(zip((a.path for a in axes), combo))
        for path, value in chosen.items():
            _set_path(values, path, value, "axis")
        candidates.append((f"p{index:03d}", chosen, values, False))

    points, errors = [], []
    for point_id, chosen, values, is_baseline in candidates:
        try:
            config = load_config(values)
        except ConfigError as error:
            label = " ".join(f"{p}={_show(v)}" for p, v in chosen.items()) or "no axis values"
            what = "baseline" if is_baseline else "grid point"
            errors.append(f"{what} {point_id} ({label}): {str(error).replace(chr(10), chr(10) + '    ')}")
            continue
        points.append(GridPoint(point_id, chosen, config, is_baseline))
    if errors:
        shown = errors[:_MAX_LISTED_ERRORS]
        more = len(errors) - len(shown)
        tail = f"\n... and {more} more bad points" if more else ""
        raise GridError(f"{len(errors)} of {len(candidates)} grid points are invalid (nothing was launched):\n"
                        + "\n".join(shown) + tail)
    return points


def _check_metric(metric: MetricSpec, points: Sequence[GridPoint]) -> None:
    from fgl_ray.data import dataset_domains

    allowed = {AVG_OVER_DOMAINS, POOLED}
    for point in points:
        allowed |= set(dataset_domains(point.config))
    if metric.domain not in allowed:
        raise GridError(f"metric.domain {metric.domain!r} is not {AVG_OVER_DOMAINS}, {POOLED} or a domain of the "
                        f"grid's datasets; valid: {', '.join(sorted(allowed))}")


# ---------------------------------------------------------------------------------- helpers
def _dict_fields() -> set[str]:
    return {name for name, f in ExperimentConfig.model_fields.items() if typing.get_origin(f.annotation) is dict}


def _check_path(path: str, what: str) -> None:
    head, *rest = path.split(".")
    if head not in ExperimentConfig.model_fields:
        valid = ", ".join(sorted(ExperimentConfig.model_fields))
        raise GridError(f"{what} {path!r}: unknown config field {head!r}; valid fields: {valid}")
    if rest and head not in _dict_fields():
        options = ", ".join(sorted(_dict_fields()))
        raise GridError(f"{what} {path!r}: {head} is not an option mapping, so it takes no dotted key; "
                        f"dotted paths go into {options}")
    if any(not part for part in rest):
        raise GridError(f"{what} {path!r} has an empty path component")


def _set_path(values: dict[str, Any], path: str, value: Any, what: str) -> None:
    _check_path(path, what)
    head, *rest = path.split(".")
    if not rest:
        values[head] = value
        return
    target = values.setdefault(head, {})
    if not isinstance(target, dict):
        raise GridError(f"{what} {path!r}: {head} holds {target!r}, not a mapping")
    values[head] = target = dict(target)
    for part in rest[:-1]:
        inner = target.get(part, {})
        if not isinstance(inner, dict):
            raise GridError(f"{what} {path!r}: {part} holds {inner!r}, not a mapping")
        target[part] = inner = dict(inner)
        target = inner
    target[rest[-1]] = value


def data_key(config: ExperimentConfig) -> str:
    """Configs with equal keys have identical client partitions (built once per key)."""
    values = config.model_dump(mode="json", include=set(DATA_FIELDS))
    values["data_dir"] = str(config.resolved_data_dir())
    values["split"] = list(config.resolved_split())
    return json.dumps(values, sort_keys=True, default=str)


def _decimals(value: float) -> int:
    text = repr(float(value))
    if "e" in text or "E" in text:
        return 12
    return len(text.split(".")[1].rstrip("0")) if "." in text else 0


def _tidy(value: float, digits: int) -> float | int:
    rounded = round(value, digits)
    return int(rounded) if digits == 0 else rounded


def _show(value: Any) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _describe_file_error(error: ValidationError) -> str:
    def unknown_key(loc: tuple) -> str:
        owner = {"metric": MetricSpec, "heatmap": HeatmapSpec}.get(str(loc[0]), GridFile) if len(loc) > 1 else GridFile
        return f"unknown key; valid keys: {', '.join(owner.model_fields)}"

    # union members each report; validation_lines keeps the distinct lines only
    lines = validation_lines(error, "grid", unknown_key)
    return "invalid grid file:\n  " + "\n  ".join(lines)
