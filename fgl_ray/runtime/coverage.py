"""What a run really covered, and failures said once with a count instead of once per round.

A federation whose clients all fail, or whose rounds never aggregate, still produces metric rows:
those of the untrained model. :class:`Coverage` counts, round by round, the clients that trained,
failed and were evaluated and the rounds that aggregated; its report goes into the summary, and a
run whose coverage falls below ``min_coverage`` is marked incomplete (``fgl-ray run`` then exits
non-zero). :class:`FailureLog` writes every failure to ``failures.jsonl`` but prints each kind of
failure (phase and reason, numbers aside) once, and the count of its repeats at the end.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Callable, TextIO

from fgl_ray.runtime.server import RoundResult

_NUMBERS = re.compile(r"\d+(\.\d+)?")


@dataclass
class Coverage:
    """Counts over the rounds of one run of ``clients`` clients."""

    clients: int
    min_clients: int
    rounds: int = 0
    aggregated: int = 0
    trained: int = 0
    selected: int = 0
    failures: int = 0
    evaluated_last: int | None = None
    empty_rounds: list[int] = field(default_factory=list)

    def observe(self, result: RoundResult) -> str | None:
        """Counts one round; returns a line to say when it aggregated nothing for the first time."""
        self.rounds += 1
        self.selected += len(result.selected)
        self.trained += len(result.updates)
        self.failures += len(result.failures)
        if result.evaluations or any(f.phase == "evaluate" for f in result.failures):
            self.evaluated_last = len(result.evaluations)
        if result.aggregated:
            self.aggregated += 1
            return None
        self.empty_rounds.append(result.round)
        if len(self.empty_rounds) == 1:
            return (f"round {result.round} aggregated nothing: {len(result.updates)} update(s) < min_clients "
                    f"{self.min_clients}; the model stays as it was (said once, counted in the summary)")
        return None

    def report(self, min_coverage: float, planned_rounds: int | None = None) -> dict:
        """The summary's ``coverage`` entry: counts, shares, ``complete`` and the ``problems`` found
        (a run stopped before its ``planned_rounds`` is ``interrupted``, hence incomplete)."""
        aggregated_share = self.aggregated / self.rounds if self.rounds else 0.0
        trained_share = self.trained / self.selected if self.selected else 0.0
        evaluated_share = (self.evaluated_last or 0) / self.clients if self.clients else 0.0
        problems = []
        if aggregated_share < min_coverage:
            problems.append(f"{self.aggregated} of {self.rounds} rounds aggregated")
        if trained_share < min_coverage:
            problems.append(f"{self.trained} of {self.selected} selected client updates arrived")
        if evaluated_share < min_coverage:
            problems.append(f"the last evaluation covered {self.evaluated_last or 0} of {self.clients} clients")
        interrupted = planned_rounds is not None and self.rounds < planned_rounds
        if interrupted:
            problems.append(f"interrupted after {self.rounds} of {planned_rounds} rounds")
        return {"rounds": self.rounds, "rounds_aggregated": self.aggregated, "rounds_without_aggregation":
                self.empty_rounds, "client_updates": self.trained, "clients_selected": self.selected,
                "failures": self.failures, "clients": self.clients, "clients_evaluated_last": self.evaluated_last,
                "min_coverage": min_coverage, "interrupted": interrupted, "complete": not problems,
                "problems": problems}


class FailureLog:
    """Writes each failure as a JSON line; says each kind of failure once through ``say``."""

    def __init__(self, sink: TextIO, say: Callable[[str], None], kinds: Counter | None = None) -> None:
        """``kinds`` counts the failures said so far (a resumed run's, from its checkpoint)."""
        self.sink, self.say = sink, say
        self.kinds: Counter[tuple[str, str]] = Counter() if kinds is None else kinds

    def record(self, result: RoundResult) -> None:
        for failure in result.failures:
            self.sink.write(json.dumps({"round": result.round, **failure.__dict__}) + "\n")
            kind = (failure.phase, _NUMBERS.sub("#", failure.reason))
            self.kinds[kind] += 1
            if self.kinds[kind] == 1:
                self.say(f"round {result.round}: client {failure.client_id} failed in {failure.phase}: "
                         f"{failure.reason} (the same failure again is counted, not printed)")
        self.sink.flush()

    def close(self) -> None:
        """Says how often each kind of failure recurred."""
        for (phase, reason), count in self.kinds.items():
            if count > 1:
                self.say(f"{count} failures in {phase} like: {reason}")
