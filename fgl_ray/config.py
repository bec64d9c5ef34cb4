"""Typed, validated experiment configuration.

Every check here runs before any Ray process starts: unknown names fail with the list of
valid ones, bad values fail naming the field and the fix.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Callable, Literal, Optional, Union

import yaml
from pydantic import (BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator,
                      model_validator)

from fgl_ray.errors import default_data_dir, file_problem, folder_name, output_folder, output_problem


class ConfigError(ValueError):
    """A configuration that cannot run; the message names the field and the fix."""


Fraction = float
#: Fields that must be >= 0, with the hint their error gives.
NON_NEGATIVE = {"weight_decay": "e.g. 1e-5 (0 disables it)", "actor_restarts": "0: a dead client actor stays dead",
                "noise_multiplier": "0: no noise", "checkpoint_every": "0: checkpoint only when interrupted"}


class Fault(BaseModel):
    """A simulated fault of some clients in some rounds (all rounds when ``rounds`` is omitted)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: Literal["raise", "nan", "scale", "delay", "kill"] = Field(
        description="raise: the client fails; nan: its update is NaN; scale: its update is multiplied by factor; "
                    "delay: it sleeps seconds before training; kill: its client actor's process exits (Ray backend)")
    clients: list[int] = Field(min_length=1, description="client ids")
    rounds: Optional[list[int]] = Field(None, description="rounds (0-based); default every round")
    factor: float = Field(100.0, description="scale: the factor")
    seconds: float = Field(1.0, ge=0.0, description="delay: the seconds")

    def applies(self, round_index: int, client_id: int) -> bool:
        return client_id in self.clients and (self.rounds is None or round_index in self.rounds)


class ExperimentConfig(BaseModel):
    """One federation: data, model, algorithm, training, runtime and output settings."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    preset: Optional[str] = Field(None, description="named paper setting whose values are defaults (twitch-S1, ...)")

    # --- data
    dataset: str = Field("synthetic", description="dataset name (`fgl-ray datasets`)")
    task: Optional[str] = Field(None, description="readout (node-classification | graph-classification, aliases "
                                                  "node | graph); default: the dataset's own")
    data_dir: Optional[Path] = Field(None, description="dataset root; default $FGL_DATA_DIR or ~/.cache/fgl-ray/datasets")
    partition: str = Field("domain", description="partitioner or preset (`fgl-ray list`)")
    num_clients: int = Field(10, description="clients for louvain/random/label-dirichlet")
    clients_per_domain: int = Field(2, description="base clients per domain (domain partition)")
    domain_ratios: Optional[list[int]] = Field(None, description="per-domain multipliers of clients_per_domain")
    dirichlet_alpha: float = Field(10.0, description="concentration of label-dirichlet")
    split: Optional[tuple[float, float, float]] = Field(None, description="train/val/test fractions; default per dataset")
    split_mode: Literal["random", "stratified", "dataset"] = Field(
        "random", description="per-client splits: random nodes, stratified by class (each class cut at the fractions), "
                              "or dataset = the dataset's own masks for the client's nodes (OGB's; their default)")
    features: Literal["raw", "svd"] = Field(
        "raw", description="node features: raw (as published), or svd = a feature_dim truncated SVD fitted on the "
                           "union of all domains (one shared space; needs equal raw widths, e.g. Twitch)")
    feature_dim: int = Field(128, description="truncated-SVD dimension when domain feature spaces differ")
    data_seed: int = Field(0, description="seed for generation, partition and splits")
    synthetic: dict[str, Any] = Field(default_factory=dict, description="options of the synthetic generator "
                                                                          "(synthetic or synthetic-mm)")
    missing: Optional[str] = Field(None, description="multimodal graphs: client:<rate> (that share of clients "
                                                     "loses one modality) or node:<rate> (that share of each "
                                                     "client's nodes loses one modality)")
    max_nodes: Optional[int] = Field(None, description="OGB datasets: keep a seeded subset of this many labelled "
                                                        "nodes and the edges among them (papers100M as FedGraph uses it)")
    max_graphs: Optional[int] = Field(None, description="graph classification: keep this many graphs of each "
                                                         "dataset after the seeded shuffle (GCFL's tiny sets: 150)")
    imbalance_ratio: int = Field(20, description="max/min training class count of the long-tailed variants (cora-lt, ...)")
    class_group_cuts: tuple[float, float] = Field(
        (1 / 3, 2 / 3), description="head/medium/tail cut points over frequency-sorted classes (fractions of C)")

    sparse_features: Literal["auto", "on", "off"] = Field(
        "auto", description="keep node features as sparse CSR inside clients (auto: density <= 10% and the model allows)")

    # --- model
    model: str = Field("gcn", description="backbone (`fgl-ray list`)")
    hidden: int = Field(128, description="hidden width")
    num_layers: int = Field(2, description="layers")
    dropout: float = Field(0.5, description="dropout probability")
    model_options: dict[str, Any] = Field(default_factory=dict, description="backbone options (e.g. propagate_in_training)")

    # --- algorithm
    algorithm: str = Field("fedavg", description="federated algorithm (`fgl-ray list`)")
    algorithm_options: dict[str, Any] = Field(default_factory=dict, description="options of the algorithm")
    aggregator: str = Field("mean", description="server aggregator (`fgl-ray list`)")
    aggregator_options: dict[str, Any] = Field(default_factory=dict, description="options of the aggregator")

    # --- training
    rounds: int = Field(50, description="communication rounds")
    batch_size: int = Field(128, description="graphs per mini-batch (graph classification), or seed nodes per "
                                             "mini-batch (node_batching: neighbor)")
    node_batching: Literal["full", "neighbor"] = Field(
        "full", description="node classification: full = one step per epoch on the client's whole graph; neighbor = "
                            "mini-batches of batch_size training nodes with num_neighbors sampled neighbours per layer")
    num_neighbors: list[int] = Field([10, 10], description="neighbours sampled per node at each layer, first hop "
                                                           "first (one entry per layer; -1 = all)")
    eval_batching: Literal["full", "sampled", "layerwise"] = Field(
        "full", description="node classification: evaluate on the whole client graph in one no-grad pass (full, "
                            "exact), on sampled batches of the split's nodes (sampled, bounded memory; needs "
                            "node_batching neighbor), or one layer at a time over chunks of batch_size nodes with "
                            "all their neighbours (layerwise: exact, bounded memory; GraphSAGE)")
    local_epochs: int = Field(5, description="local full-batch steps per round")
    optimizer: Literal["sgd", "adam"] = Field("sgd", description="local optimizer")
    lr: float = Field(0.05, description="local learning rate")
    momentum: float = Field(0.9, description="SGD momentum")
    weight_decay: float = Field(1e-5, description="L2 weight decay")
    optimizer_state: Literal["reset", "keep"] = Field(
        "reset", description="local optimizer state each round: reset = fresh (FedAvg's E steps from the global "
                             "model), keep = carried over from the client's previous round (OpenFGL)")
    fraction_fit: Fraction = Field(1.0, description="fraction of clients sampled per round, in (0, 1]")
    min_clients: int = Field(1, description="fewest successful updates for a round to aggregate")
    min_coverage: float = Field(0.9, description="a run is incomplete (non-zero exit) when fewer than this share of "
                                                 "rounds aggregate, of selected updates arrive, or of clients are "
                                                 "evaluated at the end")
    round_timeout_s: float = Field(600.0, description="seconds to wait for client updates per round")
    clip_norm: Optional[float] = Field(None, description="clip every client update to this L2 norm before "
                                                         "aggregation (DP-FedAvg); default no clipping")
    noise_multiplier: float = Field(0.0, description="Gaussian noise on each aggregate: std = noise_multiplier x "
                                                     "clip_norm x the largest client weight (needs clip_norm)")
    eval_every: int = Field(1, description="evaluate every this many rounds (and the last)")
    evaluate: Literal["global", "local"] = Field(
        "global", description="score the model each client would use now (global: the aggregated one) or each "
                              "client's model right after its local training (local, OpenFGL's default)")
    diagnostics: bool = Field(False, description="record the update-field diagnostics of FedIA Section 3.2 each round")
    diagnostics_fraction: float = Field(0.05, description="top fraction p of |u_k| for the overlap diagnostic")
    last_k: int = Field(20, description="rounds in the last-K summary")
    seed: int = Field(0, description="training seed (model init, client sampling, dropout)")

    # --- runtime
    backend: Literal["ray", "local"] = Field("ray", description="ray actors or in-process")
    clients_per_actor: Union[Literal["auto"], int] = Field(
        "auto", description="virtual clients per client actor; auto = as many actors as there are CPUs to run them "
                            "and memory to hold them, at most one per client")
    torch_threads: Optional[int] = Field(None, description="torch intra-op threads per worker; default follows CPUs")
    gpus_per_client: Union[Literal["auto"], float] = Field(
        "auto", description="GPU share (Ray num_gpus) of each client actor, which its clients_per_actor virtual "
                            "clients share: auto = min(1, GPUs / client actors) when the cluster has GPUs, none "
                            "otherwise; or a fixed fraction in (0, 1]; 0 = CPU only")
    device: Literal["auto", "cpu", "cuda"] = Field(
        "auto", description="in-process backend (--backend local): where its clients train, one after another; auto = "
                            "cuda when torch sees a GPU; Ray client actors take gpus_per_client instead")
    actor_restarts: int = Field(3, description="times Ray restarts a client actor whose process died; its clients "
                                               "are rebuilt from their partitions and loaded from the last "
                                               "checkpoint (fresh state without one)")
    checkpoint_every: int = Field(0, description="save the whole federation to the run folder's checkpoint.pt every "
                                                 "this many rounds (0: only when interrupted); continue a run with "
                                                 "fgl-ray run --resume RUN_DIR")
    failures: dict[int, list[int]] = Field(default_factory=dict, description="simulated faults: round -> client ids that raise")
    faults: list[Fault] = Field(default_factory=list,
                                description="simulated faults: [{kind: raise|nan|scale|delay|kill, "
                                            "clients: [..], rounds: [..], factor, seconds}]")

    # --- output
    output_dir: Path = Field(Path("results"), description="folder that receives one subfolder per run (a path or a "
                                                        "file:// URI)")
    run_name: Optional[str] = Field(None, description="run folder name; default algorithm-aggregator-dataset-time")
    overwrite: bool = Field(False, description="replace a run folder that already holds results (else refused)")

    @model_validator(mode="before")
    @classmethod
    def _preset_defaults(cls, values: Any, info: ValidationInfo) -> Any:
        from fgl_ray.presets import apply_preset, apply_task_defaults

        if not isinstance(values, dict):
            return values
        return apply_preset(values) if _fields_only(info) else apply_task_defaults(apply_preset(values))

    # ------------------------------------------------------------------ field checks
    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_numbers(cls, value: Any, info) -> Any:
        """YAML reads an unquoted yes/no/on/off as a boolean, which pydantic would take as 1 or 0."""
        if isinstance(value, bool) and _is_numeric(cls.model_fields[info.field_name].annotation):
            raise ValueError(f"{info.field_name} must be a number, got {value!r} (YAML reads yes, no, on and off "
                             "as booleans)")
        return value

    @field_validator("num_clients", "clients_per_domain", "rounds", "local_epochs", "eval_every", "last_k",
                     "hidden", "num_layers", "feature_dim", "min_clients", "batch_size")
    @classmethod
    def _at_least_one(cls, value: int, info) -> int:
        if value < 1:
            raise ValueError(f"{info.field_name} must be >= 1, got {value}")
        return value

    @field_validator("dirichlet_alpha", "dropout", "lr", "momentum", "weight_decay", "fraction_fit", "round_timeout_s",
                     "diagnostics_fraction", "min_coverage", "noise_multiplier", mode="after")
    @classmethod
    def _finite(cls, value: float, info) -> float:
        if not math.isfinite(value):
            raise ValueError(f"{info.field_name} must be a finite number, got {value}")
        return value

    @field_validator("momentum")
    @classmethod
    def _momentum(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError(f"momentum must be in [0, 1), got {value}; e.g. 0.9 (0 disables it)")
        return value

    @field_validator(*NON_NEGATIVE)
    @classmethod
    def _non_negative(cls, value: float, info) -> float:
        if value < 0:
            raise ValueError(f"{info.field_name} must be >= 0, got {value}; {NON_NEGATIVE[info.field_name]}")
        return value

    @field_validator("imbalance_ratio")
    @classmethod
    def _imbalance_ratio(cls, value: int) -> int:
        if value < 1:
            raise ValueError(f"imbalance_ratio must be >= 1 (1 keeps the classes' sizes equal), got {value}")
        return value

    @field_validator("class_group_cuts")
    @classmethod
    def _class_group_cuts(cls, value: tuple[float, float]) -> tuple[float, float]:
        if not 0.0 <= value[0] <= value[1] <= 1.0:
            raise ValueError(f"class_group_cuts must satisfy 0 <= head cut <= tail cut <= 1, got {value}")
        return value

    @field_validator("fraction_fit", "diagnostics_fraction", "min_coverage")
    @classmethod
    def _fraction(cls, value: float, info) -> float:
        if not 0.0 < value <= 1.0:
            raise ValueError(f"{info.field_name} must be in (0, 1], got {value}; e.g. 1.0 keeps all")
        return value

    @field_validator("dropout")
    @classmethod
    def _probability(cls, value: float) -> float:
        if not 0.0 <= value < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {value}")
        return value

    @field_validator("lr", "round_timeout_s", "dirichlet_alpha")
    @classmethod
    def _positive(cls, value: float, info) -> float:
        if value <= 0:
            raise ValueError(f"{info.field_name} must be > 0, got {value}")
        return value

    @field_validator("clip_norm")
    @classmethod
    def _clip(cls, value: Optional[float]) -> Optional[float]:
        if value is not None and not (math.isfinite(value) and value > 0):
            raise ValueError(f"clip_norm must be a finite number > 0 or unset, got {value}")
        return value

    @field_validator("clients_per_actor", mode="before")
    @classmethod
    def _clients_per_actor(cls, value: Any) -> Any:
        if value is None:
            return "auto"
        if not isinstance(value, str) and isinstance(value, int) and value < 1:
            raise ValueError(f"clients_per_actor must be auto or an integer >= 1, got {value}")
        return value

    @field_validator("torch_threads", "max_graphs", "max_nodes")
    @classmethod
    def _optional_positive(cls, value: Optional[int], info) -> Optional[int]:
        if value is not None and value < 1:
            raise ValueError(f"{info.field_name} must be >= 1 or unset, got {value}")
        return value

    @field_validator("sparse_features", mode="before")
    @classmethod
    def _yaml_switch(cls, value: Any) -> Any:
        """YAML reads an unquoted ``on`` / ``off`` as a boolean; take it as the word it was."""
        return {True: "on", False: "off"}.get(value, value) if isinstance(value, bool) else value

    @field_validator("output_dir", mode="before")
    @classmethod
    def _output_folder(cls, value: Any) -> Any:
        if isinstance(value, str) and not value.strip():
            raise ValueError("output_dir is empty; give a folder (default: results)")
        if isinstance(value, (str, Path)) and any(ord(char) < 32 or ord(char) == 127 for char in str(value)):
            raise ValueError(f"output_dir {str(value)!r} holds a control character (a newline, a tab); give a "
                             "plain folder path")
        return output_folder(value) if isinstance(value, (str, Path)) else value

    @field_validator("output_dir")
    @classmethod
    def _writable_output(cls, value: Path) -> Path:
        if problem := output_problem(value):
            raise ValueError(f"output_dir {str(value)!r} {problem}; choose a folder you can write to")
        return value

    @field_validator("run_name")
    @classmethod
    def _run_folder_name(cls, value: Optional[str]) -> Optional[str]:
        return value if value is None else folder_name(value, "run_name")

    @field_validator("gpus_per_client", mode="before")
    @classmethod
    def _gpu_share(cls, value: Any) -> Any:
        fix = "use auto (a share of the cluster's GPUs when it has some), 0 (CPU only) or a fraction in (0, 1]"
        if isinstance(value, str) and value.strip().lower() == "auto":
            return "auto"
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"gpus_per_client must be 'auto' or a number, got {value!r}; {fix}")
        if not 0.0 <= float(value) <= 1.0:
            raise ValueError(f"gpus_per_client must be in [0, 1], got {value}; {fix} "
                             "(one client actor uses at most one GPU)")
        if 0.0 < float(value) < 1e-4:
            raise ValueError(f"gpus_per_client {value} is below Ray's resource granularity 0.0001; {fix}")
        return float(value)

    @field_validator("num_neighbors")
    @classmethod
    def _fanouts(cls, value: list[int]) -> list[int]:
        if not value or any(n == 0 or n < -1 for n in value):
            raise ValueError(f"num_neighbors must list one fanout per layer, each >= 1 or -1 (all), got {value}")
        return value

    @field_validator("split")
    @classmethod
    def _split(cls, value):
        if value is None:
            return value
        if any(part < 0 for part in value) or value[0] <= 0 or abs(sum(value) - 1.0) > 1e-6:
            raise ValueError(f"split must be three non-negative fractions summing to 1 with train > 0, got {value}")
        if value[2] <= 0:
            raise ValueError(f"split {list(value)} leaves no test nodes, and every figure a run reports is a test "
                             "figure; give the test part a share, e.g. [0.6, 0.2, 0.2]")
        return value

    @field_validator("domain_ratios")
    @classmethod
    def _ratios(cls, value):
        if value is not None and (not value or any(r < 1 for r in value)):
            raise ValueError(f"domain_ratios must be positive integers, one per domain, got {value}")
        return value

    # ------------------------------------------------------------------ cross-field checks
    @model_validator(mode="after")
    def _names_and_data(self, info: ValidationInfo) -> "ExperimentConfig":
        if _fields_only(info):
            return self
        from fgl_ray.aggregators import AGGREGATORS
        from fgl_ray.algorithms import ALGORITHMS
        from fgl_ray.data import dataset_domains
        from fgl_ray.data.datasets import SYNTHETIC_MM, dataset_spec
        from fgl_ray.data.graphsets import GRAPH_PARTITIONS
        from fgl_ray.data.missing import parse_missing
        from fgl_ray.data.multimodal import MultimodalOptions
        from fgl_ray.data.partition import PARTITIONERS, PRESETS
        from fgl_ray.models import check_model_options

        from fgl_ray.data.synthetic import SyntheticOptions

        spec = dataset_spec(self.dataset)
        _check_task(self, spec)
        _check_node_batching(self)
        _check_device(self)
        if self.features == "svd" and not spec.shared_features:
            raise ValueError(
                f"features 'svd' fits one SVD on the union of the domains' raw features, but those of "
                f"{self.dataset!r} do not share coordinates (different vocabularies, or separate modalities); "
                "use features 'raw'"
            )
        _check_dataset_cuts(self, spec)
        if self.missing is not None:
            if not spec.multimodal:
                raise ValueError(f"missing removes modalities, but {self.dataset!r} is not multimodal; use "
                                 "synthetic-mm, cora-mm, citeseer-mm or mm:<folder>")
            parse_missing(self.missing)
        check_options("algorithm_options", f"algorithm {self.algorithm!r}", ALGORITHMS.get(self.algorithm).Options,
                      self.algorithm_options)
        ALGORITHMS.get(self.algorithm).check_task(self.algorithm_options, self.resolved_task())
        check_options("aggregator_options", f"aggregator {self.aggregator!r}",
                      AGGREGATORS.get(self.aggregator).Options, self.aggregator_options)
        generator = MultimodalOptions if self.dataset == SYNTHETIC_MM else SyntheticOptions
        check_options("synthetic", "generator options", generator, self.synthetic)
        check_model_options(self.model, self.model_options)
        if spec.task == "graph" or self.partition in GRAPH_PARTITIONS:
            _check_graph_partition(self, spec)
        elif self.partition in PRESETS:
            preset = PRESETS[self.partition]
            if self.dataset != preset.dataset:
                raise ValueError(
                    f"partition preset {self.partition!r} is for dataset {preset.dataset!r}, not "
                    f"{self.dataset!r}; use --dataset {preset.dataset} or another partition"
                )
        elif self.partition not in PARTITIONERS:
            valid = ", ".join(PARTITIONERS.names() + sorted(PRESETS))
            raise ValueError(f"unknown partition {self.partition!r}; valid partitions: {valid}")
        domains = dataset_domains(self)
        if self.domain_ratios is not None and len(self.domain_ratios) != len(domains):
            raise ValueError(
                f"domain_ratios has {len(self.domain_ratios)} entries but dataset {self.dataset!r} has "
                f"{len(domains)} domains ({', '.join(domains)}); give one ratio per domain"
            )
        if spec.needs_files:
            _check_data_dir(self.resolved_data_dir(), self.data_dir is not None or "FGL_DATA_DIR" in os.environ)
        for round_index in self.failures:
            if not 0 <= round_index < self.rounds:
                raise ValueError(f"failures names round {round_index}, outside 0..{self.rounds - 1}")
        if self.noise_multiplier > 0 and self.clip_norm is None:
            raise ValueError("noise_multiplier scales the noise by clip_norm, which is unset; give --clip-norm too")
        for fault in self.faults:
            if fault.kind == "kill" and self.backend != "ray":
                raise ValueError("a kill fault ends a client actor's process, so it needs backend 'ray' (the local "
                                 "backend runs every client in this process)")
            outside = [r for r in fault.rounds or () if not 0 <= r < self.rounds]
            if outside:
                raise ValueError(f"a {fault.kind} fault names rounds {outside}, outside 0..{self.rounds - 1}")
        return self

    # ------------------------------------------------------------------ helpers
    def resolved_task(self) -> str:
        """The registered task name: ``task`` (or its alias), else the dataset's own task."""
        from fgl_ray.data.datasets import dataset_spec
        from fgl_ray.tasks import canonical_task

        return canonical_task(self.task) if self.task else dataset_spec(self.dataset).tasks[0]

    def resolved_data_dir(self) -> Path:
        """The dataset root: ``data_dir``, else ``$FGL_DATA_DIR``, else the per-user cache."""
        if self.data_dir is not None:
            return Path(self.data_dir).expanduser()
        env = os.environ.get("FGL_DATA_DIR")
        return Path(env).expanduser() if env else default_data_dir()

    def resolved_split(self) -> tuple[float, float, float]:
        from fgl_ray.data.datasets import dataset_spec

        return self.split or dataset_spec(self.dataset).default_split

    def with_overrides(self, **changes: Any) -> "ExperimentConfig":
        """A validated copy with some fields changed."""
        return load_config(self.model_dump(mode="python") | changes)


def _check_dataset_cuts(config: ExperimentConfig, spec) -> None:
    """``split_mode: dataset`` needs a dataset with its own split; ``max_nodes`` one that can be cut."""
    from fgl_ray.data.datasets import DATASETS

    if config.split_mode == "dataset" and not spec.own_split:
        owners = ", ".join(name for name in DATASETS.names() if DATASETS.get(name).own_split)
        raise ValueError(f"split_mode 'dataset' keeps a dataset's own train/val/test masks, but {config.dataset!r} has "
                         f"none; use split_mode random or stratified (datasets with their own split: {owners})")
    if config.max_nodes is not None and spec.load_subset is None:
        cuttable = ", ".join(name for name in DATASETS.names() if DATASETS.get(name).load_subset is not None)
        raise ValueError(f"max_nodes cuts a seeded node subset, which {config.dataset!r} does not offer; unset it "
                         f"(datasets it applies to: {cuttable})")


def _check_graph_partition(config: ExperimentConfig, spec) -> None:
    """A graph dataset is cut into ``chunks`` (one dataset) or one client per member (``datasets``)."""
    if spec.task != "graph":
        raise ValueError(f"partition {config.partition!r} cuts graph-classification sets; {config.dataset!r} is a "
                         "node dataset (use louvain, random, label-dirichlet, domain or a preset)")
    if (config.partition == "datasets" and config.model_options.get("share") == "all" and len(spec.domains) > 1
            and not spec.shared_features):
        raise ValueError(f"model_options share: all shares every layer, but the clients of {config.dataset!r} differ "
                         "in feature width and label set; keep the default share: convs")
    valid = ("chunks", "chunks_ordered", "datasets") if len(spec.domains) == 1 else ("datasets",)
    if config.partition not in valid:
        raise ValueError(f"partition {config.partition!r} does not fit the graph dataset {config.dataset!r}; "
                         f"valid partitions: {', '.join(valid)} (chunks: shuffle one dataset and cut it into "
                         "num_clients parts; chunks_ordered: GCFL's file-order blocks of 50, the rest at random; "
                         "datasets: one client per dataset of a group)")


def _check_task(config: ExperimentConfig, spec) -> None:
    """The task exists, the dataset offers it, and the algorithm and the model support it."""
    from fgl_ray.algorithms import ALGORITHMS
    from fgl_ray.models import MODELS
    from fgl_ray.tasks import ALIASES, TASKS

    task = config.resolved_task()
    if task not in TASKS:
        valid = ", ".join(TASKS.names() + sorted(ALIASES))
        raise ValueError(f"unknown task {config.task!r}; valid tasks: {valid}")
    if task not in spec.tasks:
        raise ValueError(f"dataset {config.dataset!r} does not offer task {task!r}; its tasks: {', '.join(spec.tasks)} "
                         "(`fgl-ray datasets` lists each dataset's tasks)")
    from fgl_ray.aggregators import AGGREGATORS
    from fgl_ray.models.base import model_options

    algorithm = ALGORITHMS.get(config.algorithm)
    if algorithm.clustered and AGGREGATORS.get(config.aggregator).shared_state:
        raise ValueError(f"aggregator {config.aggregator!r} keeps one server-optimizer state, but {config.algorithm!r} "
                         "keeps one model per cluster, whose steps would mix; use the mean or fedia aggregator")
    if "modality_dims" in model_options(config.model) and not spec.multimodal:
        raise ValueError(f"model {config.model!r} reads two modalities, but {config.dataset!r} is not a multimodal "
                         "graph; use synthetic-mm, cora-mm, citeseer-mm or mm:<folder>, or another model")
    for kind, name, registry in (("algorithm", config.algorithm, ALGORITHMS), ("model", config.model, MODELS)):
        supported = registry.get(name).tasks
        if task not in supported:
            others = [n for n in registry.names() if task in registry.get(n).tasks]
            raise ValueError(f"{kind} {name!r} does not support task {task!r} (it supports {', '.join(supported)}); "
                             f"{kind}s for {task}: {', '.join(others)}")
    needed = algorithm.models
    if needed is not None and config.model not in needed:
        raise ValueError(f"algorithm {config.algorithm!r} needs the model {' or '.join(needed)}, got {config.model!r}; "
                         f"use --model {needed[0]}")


def _check_node_batching(config: ExperimentConfig) -> None:
    """Neighbour sampling serves node classification, with algorithms that train on the task's
    batches, and one fanout per layer."""
    from fgl_ray.algorithms import ALGORITHMS

    if config.eval_batching == "layerwise":
        _check_layerwise(config)
    if config.node_batching == "full":
        if config.eval_batching == "sampled":
            raise ValueError("eval_batching 'sampled' evaluates on neighbour-sampled batches, which need "
                             "node_batching 'neighbor'; set --node-batching neighbor, or keep eval_batching 'full'")
        return
    task = config.resolved_task()
    if task != "node-classification":
        raise ValueError(f"node_batching 'neighbor' samples mini-batches of seed nodes for node classification; task "
                         f"{task!r} trains on whole graphs or graph mini-batches: use node_batching 'full'")
    reason = ALGORITHMS.get(config.algorithm).whole_graph
    if reason:
        raise ValueError(f"algorithm {config.algorithm!r} {reason}, so it cannot train on sampled mini-batches; use "
                         "node_batching 'full' (or an algorithm that trains on the task's batches, e.g. fedavg)")
    if len(config.num_neighbors) != config.num_layers:
        raise ValueError(f"num_neighbors {config.num_neighbors} has {len(config.num_neighbors)} entries but the model "
                         f"has num_layers {config.num_layers}; give one fanout per layer, e.g. "
                         f"{[10] * config.num_layers} (-1 keeps every neighbour)")


def _check_layerwise(config: ExperimentConfig) -> None:
    """Layer-wise evaluation runs a node model's convolutions on chunks of target nodes."""
    from fgl_ray.algorithms import ALGORITHMS
    from fgl_ray.models import MODELS
    from fgl_ray.models.base import model_options

    fix = "use eval_batching 'full' (or 'sampled' with node_batching 'neighbor')"
    if config.resolved_task() != "node-classification":
        raise ValueError(f"eval_batching 'layerwise' evaluates node classification; {fix}")
    if not MODELS.get(config.model).trims_hops:
        layered = ", ".join(name for name in MODELS.names() if MODELS.get(name).trims_hops)
        csr = config.model_options.get("aggregation", "csr") == "csr" and "aggregation" in model_options(config.model)
        note = (f" ({config.model}'s full pass with aggregation 'csr', the default, holds no per-edge messages, "
                f"which is what layer-wise evaluation bounds)" if csr else "")
        raise ValueError(f"eval_batching 'layerwise' computes each layer for a chunk of nodes from all their "
                         f"neighbours (bipartite convolutions), which model {config.model!r} cannot; use --model "
                         f"{layered}, or {fix}{note}")
    reason = ALGORITHMS.get(config.algorithm).whole_graph
    if reason:
        raise ValueError(f"algorithm {config.algorithm!r} {reason}, so it evaluates through its own graph, not layer "
                         f"by layer; {fix}")


def _check_device(config: ExperimentConfig) -> None:
    """``device`` places the in-process backend's clients; ``cuda`` needs a GPU torch can see."""
    if config.device != "cuda":
        return
    if config.backend != "local":
        raise ValueError("device places the clients of the in-process backend (--backend local); Ray client actors "
                         "take GPU shares through gpus_per_client (auto uses the cluster's GPUs)")
    import torch

    if not torch.cuda.is_available():
        raise ValueError("device 'cuda' asks for a GPU, but torch sees no CUDA device on this machine; use --device "
                         "cpu, or auto (cuda when a GPU is visible, else cpu)")


def resolved_device(config: ExperimentConfig) -> str:
    """Where the in-process backend trains: ``device``, with ``auto`` = cuda when torch sees a GPU."""
    import torch

    if config.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return config.device


def _is_numeric(annotation: Any) -> bool:
    """Whether a field's type is a number (int, float, or an Optional / Union holding one)."""
    return annotation in (int, float) or any(arg in (int, float) for arg in getattr(annotation, "__args__", ()))


def check_options(field: str, owner: str, options: type[BaseModel], values: dict[str, Any]) -> None:
    """Validates ``values`` against ``options``.

    Raises:
        ValueError: naming ``field``, its ``owner``, every bad key and the valid options.
    """
    try:
        options(**values)
    except ValidationError as error:
        problems = "; ".join(validation_lines(error, field, lambda loc: "unknown option"))
        valid = ", ".join(sorted(options.model_fields)) or "none"
        raise ValueError(f"{field} ({owner}): {problems}; valid options: {valid}") from None


def validation_lines(error: ValidationError, root: str, unknown: Callable[[tuple], str]) -> list[str]:
    """One ``"location: message"`` line per distinct pydantic error (``root`` when it has no
    location); an unknown key gets ``unknown(loc)``, a missing one ``required``."""
    lines = []
    for item in error.errors():
        where = ".".join(str(part) for part in item["loc"]) or root
        if item["type"] == "extra_forbidden":
            message = unknown(item["loc"])
        elif item["type"] == "missing":
            message = "required"
        else:
            message = item["msg"].removeprefix("Value error, ")
        lines.append(f"{where}: {message}")
    return list(dict.fromkeys(lines))


def _check_data_dir(path: Path, explicit: bool) -> None:
    if explicit and not path.exists():
        raise ValueError(f"data_dir {str(path)!r} does not exist; pass an existing folder to --data-dir or FGL_DATA_DIR")
    if path.exists() and not path.is_dir():
        raise ValueError(f"data_dir {str(path)!r} is a file; pass the folder that holds the datasets")
    if path.exists() and not os.access(path, os.R_OK | os.X_OK):
        raise ValueError(f"data_dir {str(path)!r} is not readable; fix its permissions or choose another folder")


def read_yaml_mapping(path: str | Path, label: str, error: type[ConfigError] = ConfigError) -> dict[str, Any]:
    """The mapping a YAML file holds (empty file: ``{}``).

    Raises:
        ``error``: the file is missing or does not hold a mapping; ``label`` names it.
    """
    path = Path(path)
    if problem := file_problem(path):
        raise error(f"{label} {str(path)!r} {problem}")
    try:
        loaded = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as problem:
        raise error(f"{label} {str(path)!r} is not valid YAML: {yaml_problem(problem)}") from None
    if not isinstance(loaded, dict):
        raise error(f"{label} {str(path)!r} must hold a mapping of field: value")
    return loaded


def yaml_problem(problem: yaml.YAMLError) -> str:
    """A YAML parser error in one line: what is wrong and where (line and column, 1-based)."""
    mark = getattr(problem, "problem_mark", None)
    where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    return f"{getattr(problem, 'problem', None) or problem}{where}"


def load_config(values: dict[str, Any] | None = None, yaml_path: str | Path | None = None) -> ExperimentConfig:
    """Builds a config from an optional YAML file overlaid with ``values``.

    Raises:
        ConfigError: naming every bad field and how to fix it.
    """
    merged = read_yaml_mapping(yaml_path, "config file") if yaml_path is not None else {}
    merged.update(values or {})
    try:
        return ExperimentConfig(**merged)
    except ValidationError as error:
        raise ConfigError(_describe(error)) from None


def check_fields(values: dict[str, Any], yaml_path: str | Path | None = None) -> None:
    """The per-field checks of :func:`load_config` alone: no registry is consulted, so neither
    torch nor PyG is imported and the command line answers a bad value at once.

    Raises:
        ConfigError: as :func:`load_config` would for the same fields.
    """
    merged = read_yaml_mapping(yaml_path, "config file") if yaml_path is not None else {}
    try:
        ExperimentConfig.model_validate(merged | values, context={FIELDS_ONLY: True})
    except ValidationError as error:
        raise ConfigError(_describe(error)) from None


FIELDS_ONLY = "fields_only"


def _fields_only(info: ValidationInfo) -> bool:
    return bool(info.context and info.context.get(FIELDS_ONLY))


def _describe(error: ValidationError) -> str:
    valid = ", ".join(sorted(ExperimentConfig.model_fields))
    lines = validation_lines(error, "config", lambda loc: f"unknown field; valid fields: {valid}")
    return "invalid experiment config:\n  " + "\n  ".join(lines)
