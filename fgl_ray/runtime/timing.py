"""Where a run's time goes: its start-up, from launch to the end of round 0, in phases.

The phases are consecutive stretches of the thread that drives the run, so they add up to the
time from launch to the end of round 0 exactly:

* ``imports``: the driver's own imports (torch, PyG, fgl-ray), from the process start (CLI) or 0;
* ``data``: building the clients' partitions;
* ``ray``: waiting for Ray to start or connect, beyond what overlapped the two phases above;
* ``ship``: putting the partitions into the object store;
* ``workers``: waiting for client workers (their processes and imports), beyond the overlap;
* ``setup``: the workers (or the driver) building the clients: task data, models, optimizers;
* ``round_0``: the first round itself.

What ran in the background (Ray's start, the workers' start) is recorded whole as well, under
``background``, so the overlap can be read off.
"""

from __future__ import annotations

import os
import time

PHASES = ("imports", "data", "ray", "ship", "workers", "setup", "round_0")


def process_started_at() -> float:
    """When this process started (epoch seconds), from the OS's process table."""
    import psutil

    return psutil.Process(os.getpid()).create_time()


class StartupClock:
    """Stamps the phases of one run's start-up (see the module docstring)."""

    def __init__(self, launched: float | None = None) -> None:
        self.launched = time.time() if launched is None else launched
        self.stamps: dict[str, float] = {}
        self.background: dict[str, float] = {}

    def mark(self, phase: str) -> None:
        """Ends ``phase`` now (a phase marked twice keeps its first end)."""
        if phase not in PHASES:
            raise ValueError(f"unknown start-up phase {phase!r}; phases: {', '.join(PHASES)}")
        self.stamps.setdefault(phase, time.time())

    @property
    def finished(self) -> bool:
        return "round_0" in self.stamps

    def phases(self) -> dict[str, float]:
        """Seconds per phase, in order; a phase never marked took 0 s."""
        seconds, previous = {}, self.launched
        for phase in PHASES:
            end = self.stamps.get(phase)
            if end is None:
                seconds[phase] = 0.0
                continue
            seconds[phase] = max(0.0, end - previous)
            previous = max(previous, end)
        return seconds

    def report(self) -> dict:
        """Phases, their total (launch to the end of round 0) and the background durations."""
        phases = self.phases()
        return {"phases": phases, "total": sum(phases.values()), "background": dict(self.background)}

    def describe(self) -> str:
        """One line: ``start-up 4.2 s to the end of round 0: imports 2.1 s, data 0.3 s, ...``."""
        report = self.report()
        parts = ", ".join(f"{name.replace('_', ' ')} {value:.2f} s" for name, value in report["phases"].items() if value
                          >= 0.005)
        overlapped = ", ".join(f"{name.replace('_', ' ')} {value:.2f} s" for name, value in report["background"].items())
        line = f"start-up {report['total']:.2f} s to the end of round 0: {parts}"
        return line + (f" (in the background: {overlapped})" if overlapped else "")
