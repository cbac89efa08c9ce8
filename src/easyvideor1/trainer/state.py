"""The trainer's typed state: what a run is made of, what it draws from, and where it is.

- :class:`Components`: the working parts built at start-up (``build.py``): models, engine,
  optimizer, scheduler, KL controller, loggers.
- :class:`TrainData`: the prompts, fixed after the start-up checks.
- :class:`DataSkips`: records left out so far (counted in the metrics, never checkpointed).
- :class:`StepSettings`: what the run config fixes for every step, derived once.
- :class:`StepContext`: what every stage of a step reads (the above, bundled once).
- :class:`Step`: one step's record, passed from stage to stage (``step.py``).
- :class:`TrainState`: where the run is; what a checkpoint's ``trainer_state.json`` restores
  besides the tensors. :meth:`TrainState.state_dict` and :meth:`TrainState.load_state_dict` are
  the one way it is saved and restored (``resume.py``).

The run config itself is ``Trainer.cfg`` (:class:`~easyvideor1.config.RunConfig`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..algorithms.kl import AdaptiveKLController, FixedKLController
from ..data.dataset import MediaSample, RecordDataset
from ..models.inputs import PromptBatch
from ..models.logprobs import PolicyForward
from ..rollout.base import RolloutEngine, SamplingConfig
from ..tools.session import ToolSession
from .distributed import DistState
from .experience import Experience
from .handoff import EngineHandoff
from .metrics import MetricsLogger
from .policy import Policy
from .sampler import PromptSampler
from .skipping import SkipLog
from .teacher import Teacher
from .update import UpdateSettings


@dataclass
class Components(Policy):
    """The run's working parts: the models (:class:`~easyvideor1.trainer.policy.Policy`'s fields:
    ``model``, ``processor``, ``ref_model``, ``rollout_model``, ``lora``, ``lora_reference``,
    ``trainable_fraction``) and what start-up builds around them; released by ``Trainer.close``.

    What a checkpoint saves of them (weights, optimizer moments, scheduler position, a warmed-up
    reference) it saves through their own state dicts (``checkpoint.py``).
    """

    dist: DistState
    """This process's rank, world size and device (one process: rank 0 of 1)."""
    forward: PolicyForward
    """The policy's log-prob pass: its dummy vision passes, the frozen tower's feature cache, banned
    ids, temperature and micro-batch packing (also the LoRA reference's, adapter disabled)."""
    ref_forward: PolicyForward | None
    """The same pass over the reference model, when there is one."""
    engine: RolloutEngine
    """The rollout engine (HF over the policy or its copy, or vLLM)."""
    handoff: EngineHandoff
    """Puts the engine to sleep during an update and gives it the new weights after."""
    optimizer: torch.optim.Optimizer
    """AdamW over the trainable parameters."""
    scheduler: torch.optim.lr_scheduler.LambdaLR
    """The learning-rate schedule (warm-up, then constant or cosine), stepped per optimizer step."""
    kl_ctl: FixedKLController | AdaptiveKLController
    """The KL coefficient (``algorithm.kl.controller``), fed each step's KL."""
    logger: MetricsLogger
    """Metrics sinks (rank 0 only; the other ranks' logger has none) and console messages."""
    skip_log: SkipLog
    """``skipped_records.jsonl``: the records whose media could not be loaded."""
    tools: ToolSession | None = None
    """With ``tools.names``: the tools of the run's episodes and the frame tracks they serve."""
    teacher: Teacher | None = None
    """With ``algorithm.distill``: the teacher whose log-probs the objective reads."""

    def reference_state(self) -> torch.nn.Module | dict[str, torch.Tensor] | None:
        """What a checkpoint saves of a reference taken after the warm-up (and a resume loads):
        the reference model, or with LoRA the warmed-up adapter snapshot."""
        return self.ref_model if self.ref_model is not None else self.lora_reference

    def release(self) -> None:
        """Close the engine and drop the models, so their memory can go (``Trainer.close``)."""
        if self.engine is not None:
            self.engine.close()  # a vLLM engine tears down its groups while the process group lives
        self.model = self.ref_model = self.rollout_model = self.optimizer = self.engine = None
        self.lora_reference = None
        self.handoff = None
        self.forward = self.ref_forward = None
        self.teacher = None


@dataclass
class TrainData:
    """The prompts a run draws from, fixed after the start-up checks (``preflight.py``)."""

    train_set: RecordDataset
    """The training records (``data.train_files``)."""
    val_set: RecordDataset | None
    """The validation records, or None (no ``data.val_files`` or ``trainer.val_size=0``)."""
    train_idx: list[int]
    """Indices into ``train_set`` of the usable prompts; the sampler draws positions in this list."""
    val_idx: list[int]
    """Indices into ``val_set`` validated each time (at most ``trainer.val_size``)."""
    prompt_tokens: dict[int, int]
    """Token count of each usable training prompt (0 with ``data.preflight=fast``), for
    ``distributed.balance_tokens``."""


@dataclass
class DataSkips:
    """Records left out so far (``data/skipped_records``, ``data/dropped_overlong``).

    Not checkpointed: a resumed run re-checks its data at start-up, and a step that runs again
    finds its failing records again.
    """

    skipped_preflight: int = 0
    """Records left out at start-up (the same on every rank; counted once, on rank 0)."""
    skipped_at_step: int = 0
    """Records this rank left out at a step since start-up (e.g. with ``data.preflight=fast``)."""
    dropped_overlong: int = 0
    """Prompts this rank dropped at a step as longer than ``data.max_prompt_length`` (preflight=fast)."""
    bad_prompts: set[int] = field(default_factory=set)
    """Train indices whose media failed at a step: listed once, not retried."""


@dataclass(frozen=True)
class StepSettings:
    """What the run config fixes for every step, derived once at start-up."""

    sampling: SamplingConfig
    """Rollout sampling (``rollout.*``); with vLLM the engine also returns its token log-probs."""
    val_sampling: SamplingConfig
    """Validation sampling (``rollout.val_temperature``)."""
    update: UpdateSettings
    """Loss and aggregation of the update (its KL coefficient is the KL controller's)."""
    kl_reference: bool
    """Whether reference log-probs are computed (``algorithm.kl`` enabled)."""


@dataclass
class TrainState:
    """Where the run is: what a checkpoint's ``trainer_state.json`` restores besides the tensors.

    The weights, optimizer moments and scheduler position are the components' (saved through
    their state dicts), and the torch, CUDA and Python RNG streams are the process's (saved per
    rank by ``checkpoint.py``); the settings a checkpoint records are the run config's
    (``resume.run_settings``).
    """

    sampler: PromptSampler
    """The prompt order: epoch and position in the epoch's seeded permutation (samples consumed)."""
    step: int = 0
    """RL steps completed."""
    history: list[dict[str, float]] = field(default_factory=list)
    """Per-step rows of reward and validation metrics (``report.json`` of the demo)."""
    reference_moved: bool = False
    """The reference is no longer the loaded checkpoint but the policy as it was after the warm-up
    or at the last teacher sync (``algorithm.distill.sync_steps``); saved under the checkpoint's
    ``reference/``."""

    @property
    def epoch(self) -> int:
        """Passes over the training prompts begun so far, minus one."""
        return self.sampler.epoch

    def state_dict(self) -> dict[str, Any]:
        """The ``trainer_state.json`` keys this state owns (JSON-serialisable)."""
        return {
            "step": self.step,
            "sampler": self.sampler.state_dict(),
            "history": self.history,
            "reference_moved": self.reference_moved,
        }

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        """Restore from a checkpoint's ``trainer_state.json`` (the sampler must be for the same
        prompt count and seed, see ``PromptSampler.load_state_dict``)."""
        self.sampler.load_state_dict(saved["sampler"])
        self.step = saved["step"]
        self.history = saved.get("history", [])
        # checkpoints written before teacher syncs name it after the warm-up, its only mover then
        self.reference_moved = bool(saved.get("reference_moved", saved.get("reference_from_warmup", False)))


@dataclass(frozen=True)
class StepContext:
    """What every stage of a step reads, bundled once by the trainer: the run config, the
    components, the step settings, the prompts and the records left out, where the run is, and
    how the next prompts are drawn (``draw(draws)``: this rank's samples and their encoded batch,
    the sampler indices drawn appended to ``draws``)."""

    cfg: Any
    parts: Components
    settings: StepSettings
    data: TrainData
    skips: DataSkips
    state: TrainState
    draw: Callable[[list[int]], tuple[list[MediaSample], PromptBatch]]


@dataclass
class Step:
    """One RL step's record, filled stage by stage (``step.py``): what was drawn and generated
    (``rounds.py``: collect -> score -> filter), then the log-probs, rewards, advantages and
    update of its experience, and the step's metrics and phase times."""

    engine_version: int
    """Updates behind the weights the rollouts were sampled with (their staleness's origin)."""
    samples: list[MediaSample] = field(default_factory=list)
    """This rank's prompts, in the experience's prompt order."""
    batch: PromptBatch | None = None
    """Their encoded prompt batch."""
    experience: Experience | None = None
    """The scored groups of responses; the stages add log-probs, advantages and masks."""
    greedy_scores: torch.Tensor | None = None
    """``[P]``: the score of one greedy response per prompt, when the estimator needs it (ReMax)."""
    rewards: torch.Tensor | None = None
    """The shaped rewards (``[N]``, or ``[N, T]`` with the KL penalty in the reward)."""
    entropy: torch.Tensor | None = None
    """``[N, T]``: the old policy's entropy of each response token."""
    draws: list[int] = field(default_factory=list)
    """The sampler indices drawn (filtered-out refills included): given back if never trained."""
    metrics: dict[str, float] = field(default_factory=dict)
    """This rank's metrics of the step so far (reduced over ranks at the end)."""
    update_metrics: dict[str, float] = field(default_factory=dict)
    """The update's metrics, global already."""
    times: dict[str, float] = field(default_factory=dict)
    """Seconds per phase: ``data`` (drawing and encoding prompts), ``rollout``, ``logprobs``,
    ``update`` and the whole ``step``."""
    _started: float = field(default=0.0, repr=False)
    _mark: float = field(default=0.0, repr=False)

    def start_clock(self, started: float) -> None:
        """The step began at ``started`` (``time.perf_counter``); its data time was spent in it."""
        self._started, self._mark = started, started + self.times.get("data", 0.0)

    def lap(self, phase: str) -> None:
        """``phase`` ends now: its seconds since the previous phase ended, and the step's so far."""
        now = time.perf_counter()
        self.times[phase], self._mark = now - self._mark, now
        self.times["step"] = now - self._started
