"""``fgl-ray run | tune | report | datasets | list``: parse, validate, dispatch."""

from __future__ import annotations

import argparse
import math
import os
import re
import signal
import sys
from pathlib import Path
from typing import Any, Literal, Sequence

import yaml

from fgl_ray.config import ConfigError, ExperimentConfig, check_fields, load_config, read_yaml_mapping, yaml_problem
from fgl_ray.errors import DatasetUnavailable, PartitionError, folder_name, unreachable

#: What ``fgl-ray run`` compares when no algorithm is named.
DEFAULT_COMPARISON = ("fedavg", "local")


def _flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def _parse_value(text: str) -> Any:
    """YAML scalars, lists and mappings: ``3``, ``0.5``, ``[10,1,1]``, ``{mu: 0.01}``; a number YAML
    1.1 leaves as text (``1e9``, ``1e-3``: no dot) is taken as the number it spells."""
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError as problem:
        raise argparse.ArgumentTypeError(f"{text!r} is not valid YAML: {yaml_problem(problem)}") from None
    return float(value) if isinstance(value, str) and EXPONENT_NUMBER.fullmatch(value.strip()) else value


#: A number in exponent notation without a dot (``1e9``), which YAML 1.1 reads as text.
EXPONENT_NUMBER = re.compile(r"[-+]?(\d+\.?\d*|\.\d+)[eE][-+]?\d+")


def _is_text(annotation: Any) -> bool:
    """Whether a field holds only words or paths (``str``, ``Path``, a Literal of words, Optional of
    those), which the flag takes as typed: ``--run-name 001`` stays ``"001"``, ``off`` stays ``"off"``."""
    if annotation in (str, Path):
        return True
    args = [a for a in getattr(annotation, "__args__", ()) if a is not type(None)]
    if getattr(annotation, "__origin__", None) is Literal:
        return all(isinstance(a, str) for a in args)
    return bool(args) and all(_is_text(a) for a in args)


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", type=Path, help="YAML file of config fields (flags override it)")
    for name, field in ExperimentConfig.model_fields.items():
        parser.add_argument(_flag(name), dest=name, type=str if _is_text(field.annotation) else _parse_value,
                            default=argparse.SUPPRESS, help=(field.description or "").replace("%", "%%"))


def _config_values(args: argparse.Namespace) -> dict[str, Any]:
    return {name: getattr(args, name) for name in ExperimentConfig.model_fields if hasattr(args, name)}


#: Set to 1 to see the traceback of an unexpected error (as ``--debug`` does).
DEBUG_ENV = "FGL_RAY_DEBUG"


def _add_debug_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--debug", action="store_true",
                        help=f"show the traceback of an unexpected error (or set {DEBUG_ENV}=1)")


class _Parser(argparse.ArgumentParser):
    """Argument errors in one line with a pointer to ``--help``, not the whole usage text."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (`{self.prog} --help` lists the flags)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="fgl-ray", description="Federated graph learning simulations on Ray.")
    commands = parser.add_subparsers(dest="command", required=True)

    run = commands.add_parser("run", help="run a federation (no arguments: FedAvg vs local on synthetic data)")
    _add_config_flags(run)
    run.add_argument("--compare", type=lambda s: tuple(s.split(",")), default=None,
                     help="comma-separated algorithms to run one after another and compare")
    run.add_argument("--no-progress", action="store_true",
                     help="hide the progress bar (hidden anyway where stderr is no terminal, as in a log file)")
    run.add_argument("--resume", type=Path, default=None, metavar="RUN_DIR",
                     help="continue an interrupted run from its checkpoint.pt, as it was configured")
    run.add_argument("--address", default=None,
                     help="a running Ray cluster to join (default $RAY_ADDRESS, else a local Ray starts); runs "
                          "borrow the workers of its pool when one runs there (fgl-ray pool start)")
    _add_debug_flag(run)

    datasets = commands.add_parser("datasets", help="datasets and whether each is available offline")
    datasets.add_argument("--data-dir", type=Path, default=None, help="dataset root (default $FGL_DATA_DIR or cache)")

    listing = commands.add_parser("list", help="tasks, algorithms, aggregators, models, partitioners; with a name, "
                                               "what it is and its options")
    listing.add_argument("name", nargs="?", default=None,
                         help="an algorithm, aggregator or model: its paper, tasks and options with their defaults")
    _add_tune_commands(commands)
    return parser


def _run(args: argparse.Namespace) -> int:
    from fgl_ray.runtime.timing import StartupClock, process_started_at

    clock = StartupClock(launched=process_started_at())
    values = _config_values(args)
    if args.resume is not None:
        values = _resume_values(args, values)
    check_fields(values, args.config)   # a bad value is answered before torch and PyG load
    given = (read_yaml_mapping(args.config, "config file") if args.config else {}) | values   # the file's fields too
    if args.address and given.get("backend", "ray") != "ray":
        raise ConfigError(f"--address {args.address} names a Ray cluster, but --backend local runs in this process; "
                          "drop --address or use --backend ray")
    if args.compare:
        _check_compare(args.compare)
    algorithms = args.compare or ((given["algorithm"],) if "algorithm" in given else DEFAULT_COMPARISON)
    named = given.get("run_name")
    configs = [load_config(values | {"algorithm": name} | ({"run_name": f"{named}-{name}"} if named and
                                                           len(algorithms) > 1 else {}), yaml_path=args.config)
               for name in algorithms]
    _refuse_missing_gpus(configs[0])
    from fgl_ray.data import check_files, expected_clients
    from fgl_ray.runtime.federation import check_fits

    _STAGE.now = f"checking the files of --dataset {configs[0].dataset}"
    check_files(configs[0])
    for config in configs:
        check_fits(config, range(expected_clients(config)))
    if args.address and configs[0].backend == "ray" and (problem := unreachable(args.address)):
        raise ConfigError(f"--address {args.address}: {problem}; start the cluster (ray start --head), check the "
                          "address, or leave --address out for a local Ray")
    _STAGE.now = "starting Ray" + (f" (--address {args.address})" if args.address else "")
    simulator = _simulator(args, configs[0])   # every input is valid: Ray may start now
    try:
        return _run_all(args, configs, simulator, clock)
    finally:
        if simulator is not None:
            simulator.close(wait=False)   # leaves Ray while the tables print
            simulator.join()


def _simulator(args: argparse.Namespace, config: ExperimentConfig):
    """A Simulator that starts (or joins) Ray now, in the background, or None for an in-process run."""
    if config.backend != "ray":
        return None
    from fgl_ray.runtime.simulator import Simulator

    return Simulator(address=args.address, progress=not args.no_progress).start()


def _run_all(args: argparse.Namespace, configs: list[ExperimentConfig], simulator, clock) -> int:
    from fgl_ray.data import build_federated_data, expected_clients
    from fgl_ray.results import comparison_table, pooled_table
    from fgl_ray.runtime import run_experiment
    from fgl_ray.runtime.federation import check_fits, check_memory
    from fgl_ray.runtime.timing import StartupClock
    from fgl_ray.tasks import build_task

    clock.mark("imports")
    if simulator is not None:
        simulator.prestart(configs[0], expected_clients(configs[0]))
    _STAGE.now = (f"building the data of --dataset {configs[0].dataset} (--partition {configs[0].partition}"
                  + (f", --synthetic {configs[0].synthetic}" if configs[0].synthetic else "") + ")")
    data = build_federated_data(configs[0])
    for config in configs:
        check_fits(config, [graph.client_id for graph in data.clients])
        if not args.address:                # a cluster's workers are not this machine
            check_memory(config, data)
    print(f"{configs[0].dataset}: {len(data.clients)} clients over domains {', '.join(data.domains)}; "
          f"{data.num_features} features, {data.num_classes} classes", flush=True)
    results, startups = {}, {}
    for config in configs:
        run = simulator.run if simulator is not None else run_experiment
        _STAGE.now = f"running --algorithm {config.algorithm} --aggregator {config.aggregator}"
        result = run(config, data, progress=not args.no_progress, resume=args.resume is not None, clock=clock)
        label = f"{config.algorithm}+{config.aggregator}"
        results[label] = result
        startups[label] = clock.describe()
        clock = StartupClock()
        print(f"results: {result.run_dir}", flush=True)
        if result.summary["coverage"].get("interrupted"):
            break
    if simulator is not None:
        simulator.close(wait=False)       # shut Ray down while the tables print
    summaries = {label: result.summary for label, result in results.items()}
    evaluated = len(next(iter(summaries.values()))["rounds"])
    window = f"test, mean ± std over the last {evaluated} evaluated rounds"
    metric = build_task(configs[0]).headline
    print(f"{metric} per domain ({window}):\n{comparison_table(summaries, metric)}")
    print(f"\npooled over all clients ({window}):\n{pooled_table(summaries)}")
    if len(results) > 1:
        figure = _comparison_figure({label: result.run_dir for label, result in results.items()}, metric)
        print(f"\ncomparison of the runs' domain-average test {metric}: {figure}")
    print()
    for label, line in startups.items():
        print(f"{label}: {line}")
    for label, summary in summaries.items():
        if "local_work" in summary:
            work = summary["local_work"]
            batching = f", node batching {work['node_batching']}" if "node_batching" in work else ""
            print(f"{label}: local work {work['steps_per_client_round']:g} steps per client and round "
                  f"({work['steps_per_round']:g} per round{batching})")
    unscored = [label for label, summary in summaries.items()
                if summary["coverage"]["complete"] and not _scored(summary, metric)]
    for label in unscored:
        print(f"fgl-ray: run {label} has no test {metric} (no client held a test node it could score); "
              f"give the test split a larger share (--split) or fewer, larger clients", file=sys.stderr)
    incomplete = {label: s["coverage"] for label, s in summaries.items() if not s["coverage"]["complete"]}
    for label, coverage in incomplete.items():
        because = "; ".join(coverage["problems"])
        if coverage.get("interrupted"):
            resume = (f"; continue it with: fgl-ray run --resume {results[label].run_dir}"
                      if "checkpoint" in results[label].summary else "")
            print(f"fgl-ray: run {label} is incomplete ({because}): its summary and plots cover the finished "
                  f"rounds{resume}", file=sys.stderr)
        else:
            print(f"fgl-ray: run {label} is incomplete ({because}): its figures describe a model that was hardly "
                  "trained; see failures.jsonl", file=sys.stderr)
    if any(coverage.get("interrupted") for coverage in incomplete.values()):
        return 130
    return 1 if incomplete or unscored else 0


def _scored(summary: dict[str, Any], metric: str) -> bool:
    """Whether a run's summary holds a pooled test ``metric`` (a number, not n/a)."""
    value = summary["all"].get(metric, {}).get("mean")
    return value is not None and not math.isnan(value)


def _comparison_figure(run_dirs: dict[str, Path], metric: str) -> Path:
    """One PNG of the compared runs' domain-average test ``metric`` over rounds, beside their folders."""
    from fgl_ray.results import plot_comparison, read_metrics

    first = next(iter(run_dirs.values()))
    path = first.parent / f"comparison-{first.name}.png"
    return plot_comparison({label: read_metrics(folder) for label, folder in run_dirs.items()}, path, metric)


def _check_compare(names: Sequence[str]) -> None:
    """``--compare`` names: each one folder name (a run folder is named after it), none twice."""
    try:
        for name in names:
            folder_name(name, "--compare name")
    except ValueError as problem:
        raise ConfigError(str(problem)) from None
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ConfigError(f"--compare names {', '.join(twice)} more than once, which would run the same federation "
                          "again into another folder; list each algorithm once")


#: What ``run --resume`` lets change: where and how fast the rest of a run goes, never what it computes.
RESUME_FIELDS = ("backend", "torch_threads", "clients_per_actor", "gpus_per_client", "round_timeout_s", "data_dir",
                 "checkpoint_every")


def _resume_values(args: argparse.Namespace, typed: dict[str, Any]) -> dict[str, Any]:
    """The config recorded in the run folder ``args.resume``, with the runtime flags typed now."""
    import json
    import zipfile

    from fgl_ray.runtime.checkpoint import CHECKPOINT_FILE

    folder = args.resume.resolve()   # `--resume .` inside a run folder names it too
    if not (folder / "manifest.json").is_file():
        raise ConfigError(f"--resume {args.resume}: not a run folder (no manifest.json); pass the folder a run printed "
                          "after 'results:'")
    if not (folder / CHECKPOINT_FILE).is_file():
        raise ConfigError(f"--resume {args.resume}: the run saved no checkpoint (it finished, or ran without "
                          "--checkpoint-every and was not stopped with Ctrl-C or SIGTERM)")
    changed = sorted(set(typed) - set(RESUME_FIELDS)) + (["compare"] if args.compare else []) \
        + (["config"] if args.config else [])
    if changed:
        raise ConfigError(f"--resume continues a run as it was configured: drop {', '.join(map(_flag, changed))} "
                          f"(only {', '.join(map(_flag, RESUME_FIELDS))} may change)")
    try:
        recorded = json.loads((folder / "manifest.json").read_text())["config"]
        if not isinstance(recorded, dict):
            raise TypeError("its config is not a mapping")
    except (ValueError, TypeError, KeyError) as problem:
        raise ConfigError(f"--resume {args.resume}: manifest.json is damaged or not fgl-ray's ({_unexpected(problem)}); "
                          "the run cannot be resumed as it was configured") from None
    if not zipfile.is_zipfile(folder / CHECKPOINT_FILE):      # torch.save writes a zip; truncation breaks it
        raise ConfigError(f"--resume {args.resume}: {CHECKPOINT_FILE} is damaged (truncated, or not a checkpoint); "
                          "the run cannot continue from it")
    return recorded | typed | {"output_dir": str(folder.parent), "run_name": folder.name, "overwrite": False}


def _refuse_missing_gpus(config: ExperimentConfig) -> None:
    import torch

    from fgl_ray.runtime.resources import local_gpu_problem

    if problem := local_gpu_problem(config, torch.cuda.device_count()):
        raise ConfigError(problem)


def _datasets(args: argparse.Namespace) -> int:
    from fgl_ray.data.datasets import DATASETS, available_offline

    root = load_config({"data_dir": args.data_dir} if args.data_dir else {}).resolved_data_dir()
    if root.exists() and not root.is_dir():
        raise ConfigError(f"dataset root {str(root)!r} is not a folder; pass the folder that holds the datasets "
                          "(--data-dir or FGL_DATA_DIR)")
    print(f"dataset root: {root}" + ("" if root.exists() else " (does not exist yet: every dataset will be downloaded)"))
    rows = [(name, ",".join(spec.tasks), "yes" if available_offline(spec, root) else "no", ", ".join(spec.domains))
            for name, spec in ((name, DATASETS.get(name)) for name in DATASETS.names())]
    rows.insert(0, ("name", "tasks", "offline", "domains"))
    widths = [max(len(row[column]) for row in rows) for column in range(3)]
    for row in rows:
        print(" ".join(f"{cell:<{width}}" for cell, width in zip(row, widths)), row[3])
    return 0


def _list(args: argparse.Namespace) -> int:
    if args.name:
        from fgl_ray.describe import describe

        print(describe(args.name))
        return 0
    from fgl_ray.aggregators import AGGREGATORS
    from fgl_ray.algorithms import ALGORITHMS
    from fgl_ray.data.partition import PARTITIONERS, PRESETS
    from fgl_ray.data.graphsets import GRAPH_PARTITIONS
    from fgl_ray.models import MODELS
    from fgl_ray.tasks import TASKS

    def with_tasks(registry):
        return [f"{name} ({', '.join(registry.get(name).tasks)})" for name in registry.names()]

    for title, names in (("tasks", TASKS.names()), ("algorithms", with_tasks(ALGORITHMS)),
                         ("aggregators", AGGREGATORS.names()), ("models", with_tasks(MODELS)),
                         ("node partitioners", PARTITIONERS.names()), ("graph partitions", GRAPH_PARTITIONS),
                         ("partition presets", sorted(PRESETS))):
        print(f"{title}: {', '.join(names)}")
    return 0


def _add_tune_commands(commands) -> None:
    tune = commands.add_parser("tune", help="run a sensitivity grid (YAML) with Ray Tune; one trial per federation")
    tune.add_argument("grid", type=Path, help="grid file (see tune_configs/)")
    tune.add_argument("--output", type=Path, default=None, help="grid folder (default: the file's output_dir)")
    tune.add_argument("--resume", action="store_true", help="continue an interrupted grid; finished trials are kept")
    tune.add_argument("--set", dest="set_values", action="append", default=[], metavar="FIELD=VALUE",
                      help="override a base field for every point, e.g. --set rounds=2 (dotted paths allowed)")
    tune.add_argument("--limit", type=int, default=None, help="keep the first N values of every axis")
    tune.add_argument("--dry-run", action="store_true", help="validate and list the points, start nothing")
    tune.add_argument("--verbose", type=int, default=1, help="Tune console verbosity 0-3 (default 1)")
    tune.add_argument("--address", default=None,
                      help="a running Ray cluster to join (default $RAY_ADDRESS, else a local Ray starts); trials "
                           "borrow the workers of its pool when one runs there (fgl-ray pool start)")
    _add_debug_flag(tune)

    pool = commands.add_parser("pool", help="a pool of warm client workers on a running Ray cluster (the service)")
    actions = pool.add_subparsers(dest="action", required=True)
    start = actions.add_parser("start", help="start the pool (runs and grids on the cluster borrow from it)")
    start.add_argument("--workers", type=int, default=None, help="workers (default: one per CPU of the cluster)")
    start.add_argument("--cpus-per-worker", type=float, default=None,
                       help="CPUs each worker reserves (default: 90%% of the cluster's CPUs over the workers)")
    for action in (start, actions.add_parser("status", help="the pool's workers and who borrows them"),
                   actions.add_parser("stop", help="end the pool and its workers")):
        action.add_argument("--address", default=None,
                            help="the Ray cluster (default $RAY_ADDRESS, else the one `ray start` started here)")

    report = commands.add_parser("report", help="redraw plots of a grid folder or a run folder from stored results")
    report.add_argument("folder", type=Path, help="a grid folder (grid.json) or a run folder (metrics.parquet)")
    _add_debug_flag(report)


def _set_values(items: Sequence[str]) -> dict[str, Any]:
    values = {}
    for item in items:
        name, sep, text = item.partition("=")
        if not sep or not name.strip():
            raise ConfigError(f"--set expects FIELD=VALUE, got {item!r}")
        try:
            values[name.strip()] = _parse_value(text)
        except argparse.ArgumentTypeError as problem:
            raise ConfigError(f"--set {item}: {problem}") from None
    return values


def _tune(args: argparse.Namespace) -> int:
    from fgl_ray.tune.grid import load_grid

    _STAGE.now = f"reading the grid file {args.grid}"
    grid = load_grid(args.grid, set_values=_set_values(args.set_values), limit=args.limit, output_dir=args.output)
    print(f"grid {grid.name}: {len(grid.trials)} points over {', '.join(grid.axis_paths)}"
          f" + {len(grid.baselines)} baseline run(s) -> {grid.output_dir}", flush=True)
    if args.dry_run:
        for point in grid.points:
            print(f"  {point.id:<12} {point.label}")
        from fgl_ray.tune.report import is_grid_folder

        if is_grid_folder(grid.output_dir) and not args.resume:
            print(f"note: {grid.output_dir} already holds a grid run: running this needs --resume (to continue it) or "
                  "another --output")
        return 0
    from fgl_ray.tune.report import format_trials
    from fgl_ray.tune.runner import run_grid

    _STAGE.now = f"running the grid {grid.name} into {grid.output_dir}"
    outcome = run_grid(grid, resume=args.resume, verbose=args.verbose, address=args.address)
    import pandas as pd

    print(format_trials(pd.read_parquet(outcome.trials_table)))
    for note in outcome.notes:
        print(f"note: {note}")
    print(f"wall time {outcome.wall_s:.1f} s; {len(outcome.executed)} trial(s) run here, at most "
          f"{outcome.max_concurrent} at once ({outcome.cpus_per_trial:g} CPU per trial)")
    print(f"tables: {outcome.trials_table}, {outcome.curves_table}")
    for path in outcome.heatmaps:
        print(f"heatmap: {path}")
    print(f"tensorboard --logdir {outcome.folder}")
    if outcome.errored or outcome.unfinished:
        if outcome.errored:
            print(f"fgl-ray: trials failed: {', '.join(outcome.errored)}", file=sys.stderr)
        if outcome.unfinished:
            print(f"fgl-ray: trials not finished (interrupted): {', '.join(outcome.unfinished)}", file=sys.stderr)
        print(f"fgl-ray: continue with: fgl-ray tune {args.grid} --output {outcome.folder} --resume", file=sys.stderr)
        return 1
    return 0


def _report(args: argparse.Namespace) -> int:
    from fgl_ray.tune.report import is_grid_folder, redraw_grid, redraw_run

    folder = args.folder
    _STAGE.now = f"redrawing {folder}"
    if not folder.is_dir():
        what = "does not exist" if not folder.exists() else "is not a folder"
        raise ConfigError(f"{folder} {what}; give a grid folder (holding grid.json) or a run folder (metrics.parquet)")
    try:
        if is_grid_folder(folder):
            heatmaps, notes, table = redraw_grid(folder)
            print(table)
            for note in notes:
                print(f"note: {note}")
            for path in heatmaps:
                print(f"heatmap: {path}")
            return 0
        from fgl_ray.results import comparison_table

        curves, summary = redraw_run(folder)
        print(comparison_table({folder.name: summary}))
        print(f"learning curves: {curves}")
        return 0
    except FileNotFoundError as error:
        print(f"fgl-ray: {folder} is neither a grid folder nor a run folder: {error}", file=sys.stderr)
        return 2
    except (ValueError, TypeError, KeyError) as error:   # JSON, Parquet (ArrowInvalid) or a foreign layout
        print(f"fgl-ray: a file in {folder} is damaged or not fgl-ray's: {_unexpected(error)}", file=sys.stderr)
        return 2


def _pool(args: argparse.Namespace) -> int:
    """``fgl-ray pool start | status | stop`` on a running cluster (never a Ray of its own)."""
    import os
    import time

    from fgl_ray.runtime.ray_host import LOCAL_RAY_ENV

    for key, value in LOCAL_RAY_ENV.items():
        os.environ.setdefault(key, value)
    import ray

    from actors.service import default_shape, find_pool, start_pool, stop_pool
    from fgl_ray.runtime.resources import WorkerShape

    address = args.address or os.environ.get("RAY_ADDRESS") or "auto"
    try:
        ray.init(address=address, include_dashboard=False, configure_logging=False, log_to_driver=False)
    except ConnectionError as error:
        raise ConfigError(f"no running Ray cluster at {address!r} ({error}); start one with `ray start --head` (or "
                          "`ray up cluster.yaml`), or pass its address with --address") from None
    try:
        pool = find_pool()
        if args.action == "start":
            if pool is not None:
                print("a pool already runs on this cluster (fgl-ray pool stop ends it):")
            else:
                cluster = ray.cluster_resources()
                workers = args.workers or max(1, int(cluster.get("CPU", 1)))
                shape = default_shape(cluster, workers)
                if args.cpus_per_worker is not None:
                    shape = WorkerShape(args.cpus_per_worker, shape.gpus, shape.hide_gpus)
                started = time.perf_counter()
                start_pool(workers, shape)
                print(f"started {workers} warm client workers ({shape.cpus:g} CPUs, {shape.gpus:g} GPUs each) in "
                      f"{time.perf_counter() - started:.1f} s; runs connected to this cluster borrow them")
                pool = find_pool()
        elif args.action == "stop":
            print("stopped the pool and its workers" if stop_pool() else "no pool runs on this cluster")
            return 0
        if pool is None:
            print("no pool runs on this cluster (fgl-ray pool start starts one)")
            return 1
        status = ray.get(pool.keeper.status.remote())
        print(f"pool: {status['workers']} workers ({status['cpus_per_worker']:g} CPUs, {status['gpus_per_worker']:g} "
              f"GPUs each), {status['idle']} idle, {status['replaced']} replaced since it started")
        for lease in status["leases"]:
            print(f"  lent: {lease['workers']} to {lease['borrower']} for {time.time() - lease['since']:.0f} s")
        return 0
    finally:
        ray.shutdown()


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    handlers = {"run": _run, "datasets": _datasets, "list": _list, "tune": _tune, "report": _report, "pool": _pool}
    from fgl_ray.imports import defer_pyg_datasets
    from fgl_ray.interrupts import interrupt_on_sigterm

    defer_pyg_datasets()

    signal.signal(signal.SIGTERM, interrupt_on_sigterm)
    _STAGE.now = "reading the flags" + (f" and the config file {args.config}" if getattr(args, "config", None) else "")
    try:
        return handlers[args.command](args)
    except KeyboardInterrupt:
        print("fgl-ray: interrupted before a round finished; nothing to summarise", file=sys.stderr)
        return 130
    except (ConfigError, PartitionError, DatasetUnavailable) as error:
        print(f"fgl-ray: {_with_flags(str(error), argv)}", file=sys.stderr)
        return 2
    except Exception as error:
        if getattr(args, "debug", False) or os.environ.get(DEBUG_ENV, "") not in ("", "0"):
            raise
        print(f"fgl-ray: {_unexpected(error)} while {_STAGE.now}; results already written are kept. "
              f"Rerun with --debug (or {DEBUG_ENV}=1) for the traceback", file=sys.stderr)
        return 1


class _Stage:
    """What the command is doing, for the one line an unexpected error prints."""

    now = "starting"


_STAGE = _Stage()


def _unexpected(error: Exception) -> str:
    if isinstance(error, MemoryError):
        return "out of memory"
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text[:300]}" if text else type(error).__name__


def _with_flags(message: str, argv: Sequence[str]) -> str:
    """A config error's ``  field: ...`` lines name the flag and the value as typed, when a flag set it."""
    typed = {}
    for index, token in enumerate(argv):
        flag, sep, value = token.partition("=")
        if flag.startswith("--"):
            typed[flag] = value if sep else (argv[index + 1] if index + 1 < len(argv) else "")
    lines = message.split("\n")
    for index, line in enumerate(lines):
        field, sep, rest = line.strip().partition(": ")
        flag = _flag(field.split(".")[0])
        if sep and line.startswith("  ") and flag in typed:
            lines[index] = f"  {flag} {typed[flag]}: {rest}"
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
