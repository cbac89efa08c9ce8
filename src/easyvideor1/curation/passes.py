"""What a "pass" is, and which pass rates are kept.

A response *passes* when its accuracy reward (the reward library's ``accuracy``, the same number
training optimises) reaches the record's task threshold. Defaults, i.e. what "correct" means for
each task:

* 1.0 (exactly right) for tasks whose accuracy is right/wrong (multiple choice, numerical,
  counting, boolean, math, preference, code: all tests pass) and for OCR (edit similarity 1.0 is
  the exact text);
* 0.5 for overlap tasks (temporal, spatial and spatio-temporal grounding, tracking,
  segmentation): IoU >= 0.5, the R@0.5 criterion of grounding benchmarks;
* 0.5 for the graded rest (regression's mean relative accuracy, open-ended ROUGE/judge, user
  tasks and custom reward functions), as the evaluation report's "correct" verdict.

``--pass-threshold X`` sets one threshold for every task; ``--pass-threshold TASK=X`` (repeatable)
one task's. The kept band ``lo:hi`` is *inclusive* at both ends and compared exactly (fractions),
so with ``n=8`` the default ``0.1:0.9`` keeps 1/8 ... 7/8: the report's "neither always nor
never solved" (0 < pass rate < 1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

from ..errors import ConfigError
from ..rewards import UnknownTaskError, resolve_task

EXACT_TASKS = frozenset(
    {"multiple_choice", "numerical", "counting", "boolean", "math", "preference", "code", "ocr"}
)
OVERLAP_TASKS = frozenset(
    {"temporal_grounding", "spatial_grounding", "spatiotemporal_grounding", "tracking", "segmentation"}
)
GRADED_DEFAULT = 0.5


def default_threshold(task: str) -> float:
    """The accuracy a response of ``task`` (canonical name) needs to count as a pass."""
    if task in EXACT_TASKS:
        return 1.0
    return 0.5 if task in OVERLAP_TASKS else GRADED_DEFAULT


def _unit(value: str, what: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise ConfigError(f"{what}: expected a number in [0, 1], got {value!r}") from None
    if not 0.0 <= x <= 1.0:
        raise ConfigError(f"{what}: must be in [0, 1], got {value}")
    return x


@dataclass(frozen=True)
class PassRule:
    """Per-task pass thresholds on the accuracy reward.

    Attributes:
        everywhere: One threshold for every task (``--pass-threshold X``); None = per-task defaults.
        per_task: Canonical task name -> threshold (``--pass-threshold TASK=X``); wins over the rest.
    """

    everywhere: float | None = None
    per_task: dict[str, float] = field(default_factory=dict)

    @classmethod
    def parse(cls, items: list[str] | None) -> PassRule:
        """``["0.7"]``, ``["ocr=0.8", "temporal grounding=0.3"]`` or both; task names may be aliases."""
        everywhere, per_task = None, {}
        for item in items or []:
            if "=" in item:
                name, value = item.rsplit("=", 1)
                try:
                    task = resolve_task(name.strip()).name
                except UnknownTaskError as e:
                    raise ConfigError(f"--pass-threshold {item!r}: {e}") from None
                per_task[task] = _unit(value.strip(), f"--pass-threshold {item!r}")
            else:
                everywhere = _unit(item.strip(), "--pass-threshold")
        return cls(everywhere, per_task)

    def threshold(self, task: str) -> float:
        if task in self.per_task:
            return self.per_task[task]
        return self.everywhere if self.everywhere is not None else default_threshold(task)

    def passes(self, task: str, accuracy: float) -> bool:
        # a hair of slack: 0.1 + 0.2 style float sums must not fail a threshold they meet
        return accuracy >= self.threshold(task) - 1e-9

    def describe(self) -> dict:
        return {"everywhere": self.everywhere, "per_task": dict(sorted(self.per_task.items()))}


@dataclass(frozen=True)
class Band:
    """The kept pass-rate band, inclusive at both ends (``lo <= passes/n <= hi``, exact arithmetic)."""

    lo: Fraction
    hi: Fraction
    text: str

    @classmethod
    def parse(cls, text: str) -> Band:
        parts = text.split(":")
        if len(parts) != 2:
            raise ConfigError(f"--keep expects LO:HI (e.g. 0.1:0.9), got {text!r}")
        try:
            lo, hi = (Fraction(p.strip()) for p in parts)
        except (ValueError, ZeroDivisionError):
            raise ConfigError(f"--keep expects two numbers LO:HI, got {text!r}") from None
        if not (0 <= lo <= hi <= 1):
            raise ConfigError(f"--keep LO:HI needs 0 <= LO <= HI <= 1, got {text!r}")
        return cls(lo, hi, text)

    def keeps(self, passes: int, n: int) -> bool:
        rate = Fraction(passes, n)
        return self.lo <= rate <= self.hi

    def describe(self) -> dict:
        return {"lo": float(self.lo), "hi": float(self.hi), "inclusive": True, "text": self.text}
