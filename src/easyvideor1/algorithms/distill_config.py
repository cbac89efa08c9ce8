"""The `algorithm.distill` section: learning from a teacher on the policy's own rollouts (torch-free).

The objectives (`algorithms/distill.py`, each registered with its paper) turn the teacher's
log-probs of the student's sampled tokens into a training signal mixed with the verifiable
reward's; the teacher (`trainer/teacher.py`) is a checkpoint or the policy itself shown privileged
context (`data/privileged.py`). Off by default (`objective: none`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError
from ..validation import in_range, non_negative, one_of, whole_number
from ._registry import DISTILL_OBJECTIVES, UnknownAlgorithmError, build_options, distill_objective_options

KEY = "algorithm.distill"
SELF_TEACHERS = ("policy", "reference")


@dataclass
class DistillConfig:
    """Distillation from a teacher (`docs/concepts/distillation.md`).

    Parameters:
        objective (`str`, *optional*, defaults to `"none"`):
            Registered objective: `opd` (on-policy distillation: the per-token reverse KL to the
            teacher as a dense advantage), `gkd` (the forward KL to the teacher's top-k
            distribution as a loss term),
            `rlsd` (RLVR with self-distillation: the verifiable advantage's sign, the teacher's
            per-token evidence for its magnitude), or your own (`@register_distill_objective`);
            `none` trains on the verifiable reward alone.
        teacher (`str`, *optional*, defaults to `""`):
            A model directory (same family and token ids as the policy; its size may differ), or
            `self`: the policy itself, shown `context`.
        self_teacher (`str`, *optional*, defaults to `"policy"`):
            With `teacher: self`: `policy` (the current weights) or `reference` (the frozen
            reference model; with LoRA the adapter-free base).
        context (`str`, *optional*, defaults to `"auto"`):
            What the teacher sees that the student does not: `answer` (the record's reference
            answer after the question, `data/privileged.py`), a `.jinja` file rendered per record
            (its fields, `answer` included), or `none`. `auto`: `answer` for a self-teacher, `none`
            for a checkpoint.
        reward_weight (`float`, *optional*, defaults to `1.0`):
            Weight of the verifiable reward's advantages in the mix (0: the teacher's signal alone).
        coef (`float`, *optional*, defaults to `1.0`):
            Weight of the teacher's signal (each objective's docstring says where it enters).
        options (`dict`, *optional*, defaults to `{}`):
            The objective's own options (`algorithm.distill.options.top_k=32`), declared beside it.
        offload (`bool`, *optional*, defaults to `false`):
            A checkpoint teacher's shards live in CPU memory and are gathered per layer (torchrun
            on GPUs), for a teacher that does not fit beside the policy.
        memory_gib (`float`, *optional*, defaults to `0`):
            Memory per rank the teacher's weights may take; a checkpoint that needs more is refused
            before it loads. 0: what is free where its weights will live when it loads.
        micro_batch_size (`int`, *optional*, defaults to `0`):
            Sequences per teacher forward (0: `trainer.micro_batch_size`): a larger teacher may need
            fewer.
        max_tokens_per_micro_batch (`int`, *optional*, defaults to `0`):
            Token budget per teacher forward (0: `trainer.max_tokens_per_micro_batch`).
        sync_steps (`int`, *optional*, defaults to `0`):
            With `self_teacher: reference`: every this many steps the reference becomes the policy
            as it is then (the RLSD authors' recipe: a frozen teacher re-synced every 20 steps);
            0 keeps the starting weights. The reference then moves with checkpoints and resumes.
    """

    objective: str = "none"
    teacher: str = ""
    self_teacher: str = "policy"
    context: str = "auto"
    reward_weight: float = 1.0
    coef: float = 1.0
    options: dict[str, Any] = field(default_factory=dict)
    offload: bool = False
    memory_gib: float = 0.0
    micro_batch_size: int = 0
    max_tokens_per_micro_batch: int = 0
    sync_steps: int = 0

    def __post_init__(self) -> None:
        try:
            self.objective = (
                "none" if self.objective == "none" else DISTILL_OBJECTIVES.canonical(self.objective)
            )
        except UnknownAlgorithmError as e:
            raise UnknownAlgorithmError(f"{KEY}.objective: {e}") from None
        one_of(f"{KEY}.self_teacher", self.self_teacher, SELF_TEACHERS)
        non_negative(f"{KEY}.reward_weight", self.reward_weight)
        non_negative(f"{KEY}.coef", self.coef)
        non_negative(f"{KEY}.memory_gib", self.memory_gib)
        whole_number(f"{KEY}.micro_batch_size", self.micro_batch_size)
        whole_number(f"{KEY}.max_tokens_per_micro_batch", self.max_tokens_per_micro_batch)
        whole_number(f"{KEY}.sync_steps", self.sync_steps)
        self.objective_settings()  # the objective checks its options
        if self.context not in ("auto", "answer", "none") and not str(self.context).endswith(".jinja"):
            raise ConfigError(f"{KEY}.context={self.context!r}: use auto, answer, none or a .jinja file")
        if self.objective == "rlsd":  # coef is RLSD's share lambda of the teacher's reweighting
            in_range(f"{KEY}.coef", self.coef, 0.0, 1.0)
        if not self.enabled:
            if self.teacher:
                raise ConfigError(f"{KEY}.teacher is set but {KEY}.objective is none: name an objective")
            return
        if not self.teacher:
            raise ConfigError(
                f"{KEY}.objective={self.objective} needs {KEY}.teacher (a model directory, or self)"
            )
        if self.teacher == "self" and self.context_source == "none":
            raise ConfigError(
                f"{KEY}.teacher=self with {KEY}.context=none: the policy would teach itself what it already "
                "does (a zero signal); give it privileged context (answer, or a .jinja file)"
            )
        if self.teacher != "self" and self.self_teacher != "policy":
            raise ConfigError(f"{KEY}.self_teacher applies to teacher=self only (teacher={self.teacher!r})")
        if self.sync_steps and (self.teacher != "self" or self.self_teacher != "reference"):
            raise ConfigError(
                f"{KEY}.sync_steps re-syncs a frozen self-teacher: it needs {KEY}.teacher=self and "
                f"{KEY}.self_teacher=reference (got teacher={self.teacher!r}, self_teacher={self.self_teacher})"
            )
        if self.offload and self.teacher == "self":
            raise ConfigError(f"{KEY}.offload applies to a checkpoint teacher (teacher=self is the policy)")
        if self.coef == 0 and self.reward_weight == 0:
            raise ConfigError(f"{KEY}.coef and {KEY}.reward_weight are both 0: nothing would be learned")

    @property
    def enabled(self) -> bool:
        return self.objective != "none"

    @property
    def context_source(self) -> str:
        """The context the teacher sees: `context`, with `auto` resolved by the teacher's kind."""
        if self.context != "auto":
            return self.context
        return "answer" if self.teacher == "self" else "none"

    @property
    def kind(self) -> str:
        """`advantage` (the objective makes the advantages) or `loss` (it adds a loss term)."""
        return DISTILL_OBJECTIVES.metadata(self.objective).get("kind", "advantage") if self.enabled else ""

    @property
    def top_k(self) -> int:
        """The teacher's ids per position a `loss` objective reads (its `top_k` option; 0 otherwise)."""
        settings = self.objective_settings() if self.kind == "loss" else None
        return int(getattr(settings, "top_k", 0)) if settings is not None else 0

    def objective_settings(self) -> Any:
        """The selected objective's options dataclass, built from `options` (every objective's
        declared keys are checked, so a typo fails whichever objective is selected)."""
        selected, unknown = build_options(
            DISTILL_OBJECTIVES.names(), distill_objective_options, dict(self.options), self.objective
        )
        if unknown:
            raise ConfigError(
                f"{KEY}.options.{unknown[0]}: no registered distillation objective takes this option"
            )
        return selected

    def objective_arguments(self) -> dict[str, Any]:
        """The keyword options the selected objective's function takes."""
        settings = self.objective_settings()
        return {} if settings is None else dataclasses.asdict(settings)
