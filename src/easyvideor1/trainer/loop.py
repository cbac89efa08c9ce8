"""The RL loop: collect -> score -> filter -> log-probs -> shape -> advantages -> mask -> update.

``Trainer(cfg).train()`` runs ``trainer.max_steps`` steps from a :class:`~easyvideor1.config.RunConfig`,
validating, checkpointing and resuming as configured. The Trainer holds the typed pieces of
``state.py`` and orchestrates: start-up is ``build.py``, a step is a :class:`~.state.Step` record
passed through the stages of ``rounds.py`` (its collection) and ``step.py`` (the rest), saving and
resuming ``resume.py``.
"""

from __future__ import annotations

import time
from functools import partial

import torch

from ..errors import ConfigError
from ..resolve import resolve_config
from . import resume, warmup
from . import step as stages
from .ahead import RolloutsAhead
from .background_eval import BackgroundEvals
from .build import build_components, load_data, start, step_settings
from .distributed import shutdown_distributed
from .draws import PromptDraws
from .evaluate import has_video, validate_policy
from .policy import move_reference
from .rounds import collect_step
from .sampler import PromptSampler
from .state import Step, StepContext, TrainState


class Trainer:
    """One training run.

    Attributes (the types of ``state.py``):
        cfg: The run config (:class:`~easyvideor1.config.RunConfig`).
        parts: :class:`Components`: models, engine, optimizer, scheduler, KL controller, loggers.
        data: :class:`TrainData`: the training and validation prompts.
        skips: :class:`DataSkips`: the records left out so far.
        draws: :class:`~.draws.PromptDraws`: this rank's prompts, step after step.
        settings: :class:`StepSettings`: sampling and update settings derived from ``cfg``.
        state: :class:`TrainState`: where the run is (step, prompt order, history); what a
            checkpoint restores.
        context: :class:`StepContext`: the above as every stage of a step reads them.
    """

    def __init__(self, cfg):
        dist = start(cfg)
        self.cfg = cfg = resolve_config(cfg)  # the checkpoint names the family: the config finished once
        self.parts = build_components(cfg, dist)
        self.data, self.skips = load_data(cfg, self.parts)
        self.settings = step_settings(cfg)
        tc = cfg.trainer
        self.state = TrainState(PromptSampler(len(self.data.train_idx), tc.prompts_per_step, seed=tc.seed))
        # sync mode: the next draw's media load while this step trains (prefetch.py)
        prefetch = cfg.data.prefetch and not cfg.rollout.overlaps
        self.draws = PromptDraws(cfg, self.parts, self.data, self.skips, self.state, prefetch)
        self.context = StepContext(
            cfg, self.parts, self.settings, self.data, self.skips, self.state, self.draws.next
        )
        # rollout.mode one_step_off / async: the batches generated during the updates (ahead.py)
        rc = cfg.rollout
        self._ahead = (
            RolloutsAhead(partial(collect_step, self.context), self.parts.handoff, rc.depth)
            if rc.overlaps
            else None
        )
        # trainer.eval: benchmark evaluations of checkpoints in background processes
        self.evals = BackgroundEvals(cfg, self.parts)

    @property
    def engine_version(self) -> int:
        """Updates behind the weights the rollout engine holds (or has been pushed)."""
        return self.parts.handoff.version

    # ------------------------------------------------------------- what callers read (CLI, demo)
    @property
    def step(self) -> int:
        return self.state.step

    @property
    def history(self) -> list[dict[str, float]]:
        return self.state.history

    @property
    def reference_moved(self) -> bool:
        return self.state.reference_moved

    @property
    def model(self) -> torch.nn.Module:
        return self.parts.model

    @property
    def optimizer(self) -> torch.optim.Optimizer:
        return self.parts.optimizer

    @property
    def ref_model(self) -> torch.nn.Module | None:
        return self.parts.ref_model

    @property
    def rollout_model(self) -> torch.nn.Module | None:
        return self.parts.rollout_model

    @property
    def lora_reference(self) -> dict[str, torch.Tensor] | None:
        return self.parts.lora_reference

    @property
    def trainable_fraction(self) -> float:
        return self.parts.trainable_fraction

    # ------------------------------------------------------------------------------------- one step
    def rl_step(self) -> dict[str, float]:
        """One step, as the README describes it: collect -> score -> filter (``rounds.py``, here or
        generated ahead) -> log-probs -> shape -> advantages -> mask -> update (``step.py``), the
        rollout engine asleep from the log-probs on, then given the new weights."""
        ctx, handoff = self.context, self.parts.handoff
        started = time.perf_counter()
        step = self._rollouts()
        handoff.release()  # generation is over: the engine sleeps through log-probs and update
        if self._ahead is not None:  # the next steps' rollouts, on the weights from before this update
            self._ahead.fill(self.cfg.trainer.max_steps - self.state.step - 1)
        step.start_clock(started)
        step.lap("rollout")
        stages.logprobs(ctx, step)
        stages.shape(ctx, step)
        step.lap("logprobs")
        stages.advantages(ctx, step)
        stages.mask(ctx, step)
        # after the update: free the cache, wake the engine's weights, push, wake its KV cache
        # (generating ahead: the rollout thread loads the new weights before its next batch)
        with handoff:
            stages.update(ctx, step)
        step.lap("update")
        return stages.metrics(ctx, step)

    def _rollouts(self) -> Step:
        """This step's rollouts: the oldest batch generated ahead (``one_step_off`` / ``async``),
        else collected now. Logs their staleness (updates between their weights and the policy's);
        a batch past ``rollout.max_staleness`` (``on_stale=drop``) is dropped, its prompts given
        back to the sampler."""
        rc, step = self.cfg.rollout, self.state.step
        dropped = 0
        got = self._ahead.take() if self._ahead is not None else None
        while got is not None and step - got.engine_version > (rc.max_staleness or 0):
            dropped += len(got.samples)
            self.state.sampler.requeue(got.draws)
            self._ahead.fill(self.cfg.trainer.max_steps - step)
            got = self._ahead.take()
        if got is None:
            self.parts.handoff.ensure_awake()
            got = collect_step(self.context, self.engine_version)
        if rc.mode != "sync":
            staleness = float(step - got.engine_version)
            got.metrics.update(
                {
                    "rollout/staleness_mean": staleness,
                    "rollout/staleness_max": staleness,
                    "rollout/dropped_stale": float(dropped),
                }
            )
        return got

    # ------------------------------------------------------------------ warm-up and validation
    def sft_warmup(self) -> bool:
        """The supervised warm-up (``warmup.py``); the KL reference then moves to the warmed-up
        policy. False when there was nothing to do."""
        if not warmup.sft_warmup(
            self.cfg,
            self.parts,
            self.data.train_set,
            self.data.train_idx,
            self.draws.loadable,
            self.settings.sampling.max_new_tokens,
        ):
            return False
        if move_reference(self.parts):
            self.state.reference_moved = True
        return True

    def validate(self, probes: bool = False) -> dict[str, float]:
        """Validation metrics, always on the current weights (an engine generating ahead finishes
        its batches in flight and loads them first); with ``probes``, the video probes too
        (``trainer/evaluate.py``)."""
        parts, data = self.parts, self.data
        if self._ahead is not None:
            self._ahead.drain()
        parts.handoff.ensure_awake()
        return validate_policy(
            parts.engine,
            parts.processor,
            parts.dist,
            data.val_set,
            data.val_idx,
            self.settings.val_sampling,
            self.cfg,
            self.state.step,
            probes,
            tools=parts.tools,
        )

    # ----------------------------------------------------------------------------------- the loop
    def restore(self) -> bool:
        """Continue from the checkpoint ``trainer.resume`` names, if any (``resume.py``): the
        components' tensors in place, then :attr:`state`. Whether one was restored."""
        saved = resume.restore(self.cfg, self.parts, len(self.data.train_idx))
        self.evals.recover(0 if saved is None else saved["step"])
        if saved is None:
            return False
        self.state.load_state_dict(saved)
        self.parts.handoff.renumber(self.state.step)  # resume.restore pushed the restored weights
        if self._ahead is not None:
            self._ahead.drain()  # the rollout thread loads them now
        return True

    def save(self) -> None:
        """Checkpoint the current step (the counterpart of :meth:`restore`). Rollouts generated
        ahead and not trained yet are not saved: their prompts are saved as given back to the
        sampler, so a resumed run draws and generates them again (none trained twice, none lost)."""
        if self._ahead is None:
            resume.save(self.cfg, self.parts, self.state)
            return
        in_flight = [i for b in self._ahead.drain() for i in b.draws]
        if not in_flight:
            resume.save(self.cfg, self.parts, self.state)
            return
        sampler = self.state.sampler
        now = sampler.state_dict()
        sampler.requeue(in_flight, front=True)
        try:
            resume.save(self.cfg, self.parts, self.state)
        finally:
            sampler.load_state_dict(now)

    def train(self) -> dict[str, float]:
        tc, logger = self.cfg.trainer, self.parts.logger
        probing = tc.video_probe_every > 0
        if probing and not self.data.val_idx:
            raise ConfigError(
                "trainer.video_probe_every needs validation prompts: set data.val_files and "
                "trainer.val_size > 0 (or trainer.video_probe_every=0)"
            )
        val_set, val_idx = self.data.val_set, self.data.val_idx
        if probing and self.parts.dist.is_main and not any(has_video(val_set, i) for i in val_idx):
            logger.write("trainer.video_probe_every: no validation prompt has a video; nothing to probe")
        self.restore()
        state = self.state
        if state.step == 0:
            # how much of the model trains (LoRA: the adapters' share), in metrics.jsonl at step 0
            fraction = self.parts.trainable_fraction
            logger.log(0, {"model/trainable_fraction": fraction})
            logger.write(f"trainable parameters: {100 * fraction:.3f}% of the model")
            before = self.validate(probes=probing)
            state.history.append({"step": 0, **before})
            logger.log(0, before)
            if self.sft_warmup():
                warm = {f"{k}_after_warmup": v for k, v in self.validate(probes=probing).items()}
                state.history.append({"step": 0, **warm})
                logger.log(0, warm)
        while state.step < tc.max_steps:
            metrics = self.rl_step()
            state.step += 1
            sync = self.cfg.algorithm.distill.sync_steps
            if sync and state.step % sync == 0:  # the self-teacher becomes the policy of this step
                state.reference_moved = move_reference(self.parts) or state.reference_moved
            probe_now = probing and state.step % tc.video_probe_every == 0
            val_now = (tc.val_every and state.step % tc.val_every == 0) or probe_now
            if val_now and state.step < tc.max_steps:
                metrics.update(self.validate(probes=probe_now))
            state.history.append(
                {
                    "step": state.step,
                    **{k: v for k, v in metrics.items() if "/" in k and k.split("/")[0] in ("reward", "val")},
                }
            )
            logger.log(
                state.step, metrics, ("reward/overall", "reward/accuracy", "val/accuracy", "val/video_gap")
            )
            if tc.save_every and state.step % tc.save_every == 0:
                self.save()
            if self.evals.due(state.step):
                self.evals.start(state.step)
            self.evals.poll()
        final = self.validate(probes=probing)
        logger.log(state.step, final)
        state.history.append({"step": state.step, **final})
        self.save()  # (re)saves the last step with the final validation in its history
        self.evals.wait()
        logger.close()
        return final

    def close(self) -> None:
        """Release the models and leave the process group (see ``shutdown_distributed``)."""
        if self._ahead is not None:
            self._ahead.close()
            self._ahead = None
        self.draws.close()
        self.evals.close()
        self.parts.release()
        shutdown_distributed()
