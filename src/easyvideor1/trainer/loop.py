"""The RL loop: batch -> rollout -> rewards -> advantages -> old/ref log-probs -> update -> metrics.

``Trainer(cfg).train()`` runs ``trainer.max_steps`` steps from a :class:`~easyvideor1.config.RunConfig`,
validating, checkpointing and resuming as configured.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time

import torch

from ..algorithms.kl import kl_penalty
from ..algorithms.masked import masked_mean
from ..algorithms.shaping import ShapedRewards, shape_rewards
from ..data.dataset import RecordDataset, encode_prompts
from ..models.lora import copy_adapter, reference_forward
from ..models.packing import check_packable
from ..models.vision import DummyVisionPass
from ..models.vision_cache import VisionFeatureCache
from ..rollout.base import SamplingConfig
from .advantages import needs_greedy_baseline, step_advantages
from .checkpoint import save_checkpoint
from .distributed import (
    all_gather,
    init_distributed,
    reduce_over_ranks,
    shutdown_distributed,
    split_prompts,
    sum_over_ranks,
)
from .evaluate import has_video, validate_policy
from .experience import Experience, collect
from .metrics import MetricsLogger, hybrid_metrics, mismatch_metrics, reward_metrics
from .policy import build_policy
from .preflight import preflight
from .resume import resume, run_settings
from .rollout_engines import EngineHandoff, make_rollout_engine
from .rounds import filter_rounds
from .sampler import PromptSampler
from .skipping import SkipLog, loadable_samples
from .update import UpdateSettings, experience_logprobs, policy_update
from .warmup import sft_warmup


def _lr_lambda(warmup: int, total: int, schedule: str):
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "cosine" and total > warmup:
            progress = min(1.0, (step - warmup) / max(1, total - warmup))
            return 0.5 * (1 + math.cos(math.pi * progress))
        return 1.0

    return f


# metrics that count things per step (summed over ranks; every other metric is averaged)
_COUNT_METRICS = (
    "reward/errors",
    "hybrid/groups_with_offline",
    "hybrid/offline_truncated",
    "filter/kept_groups",
    "filter/dropped_groups",
    "data/dropped_overlong",
    "data/skipped_records",
)


class Trainer:
    def __init__(self, cfg):
        self.cfg = cfg
        tc, self.alg = cfg.trainer, cfg.algorithm
        self.dist = init_distributed(cfg.distributed)
        if tc.prompts_per_step % self.dist.world or tc.mini_batch_prompts % self.dist.world:
            raise ValueError(
                f"trainer.prompts_per_step ({tc.prompts_per_step}) and trainer.mini_batch_prompts "
                f"({tc.mini_batch_prompts}) must be multiples of the number of ranks ({self.dist.world})"
            )
        if not cfg.model.path:
            raise ValueError("model.path is not set: give a Hugging Face Qwen-VL checkpoint directory")
        if not cfg.data.train_files:
            raise ValueError("data.train_files is empty: give at least one training data file")
        cfg.data = cfg.data.with_model(
            cfg.model.path
        )  # the checkpoint names the family (data.model_family checks it)
        torch.manual_seed(tc.seed)
        random.seed(tc.seed)
        self.kl_reference = self.alg.kl.enabled
        policy = build_policy(cfg, self.dist, self.kl_reference, warmup=bool(tc.sft_warmup_steps))
        self.model, self.processor = policy.model, policy.processor
        self.ref_model, self.rollout_model = policy.ref_model, policy.rollout_model
        self.lora, self.lora_reference = policy.lora, policy.lora_reference
        self.trainable_fraction = policy.trainable_fraction
        if self.dist.enabled:
            torch.manual_seed(tc.seed + 1_000_003 * self.dist.rank)  # independent sampling per rank
        self.dummy = DummyVisionPass(self.model)
        # under FSDP the reference forward is a collective too; alone, it needs no dummy passes
        self.ref_dummy = DummyVisionPass(self.ref_model) if self.ref_model and self.dist.enabled else None
        if tc.padding_free:
            check_packable(self.model)  # a clear start-up error where packing cannot be exact
        # a frozen tower's features are computed once per step and reused by every forward
        self.vision_cache = (
            VisionFeatureCache([self.model, self.ref_model]) if cfg.model.freeze_vision_tower else None
        )
        self.engine = self._make_engine()
        sleep = cfg.rollout.engine == "vllm" and cfg.rollout.vllm.sleep_between_phases
        self.handoff = EngineHandoff(self.engine, self.model, sleep=sleep)
        self.train_set = RecordDataset.from_files(cfg.data.train_files, cfg.data)
        self.val_set = (
            RecordDataset.from_files(cfg.data.val_files, cfg.data, self.train_set.loader)
            if cfg.data.val_files and tc.val_size > 0
            else None
        )
        for split, files, dataset in (
            ("train", cfg.data.train_files, self.train_set),
            ("val", cfg.data.val_files, self.val_set),
        ):
            empty = [f for f in files if dataset is not None and f not in dataset.data_files]
            if empty:  # else "no prompt fits data.max_prompt_length", which sends one looking elsewhere
                raise ValueError(f"{split} file {empty[0]} has no records")
        loggers = tc.loggers if self.dist.is_main else []  # rank 0 reports; the others stay quiet
        self.logger = MetricsLogger(tc.output_dir, loggers, dataclasses.asdict(cfg), tc.max_steps)
        self.skip_log = SkipLog(tc.output_dir)
        if self.dist.is_main:
            self.skip_log.start()
        self.skipped_preflight = 0  # records left out at start-up (the same on every rank)
        self.skipped_at_step = 0  # records this rank left out later (e.g. with data.preflight=fast)
        self.bad_prompts: set[int] = set()  # train indices whose media failed at a step
        self.train_idx = self.preflight(self.train_set, "train")
        self.val_idx = self.preflight(self.val_set, "val", max_count=tc.val_size) if self.val_set else []
        self.kl_ctl = self.alg.make_kl_controller()
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(
            params, lr=tc.lr, betas=tuple(tc.betas), weight_decay=tc.weight_decay
        )
        updates_per_step = tc.ppo_epochs * (tc.prompts_per_step // tc.mini_batch_prompts)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, _lr_lambda(tc.warmup_steps, tc.max_steps * updates_per_step, tc.lr_schedule)
        )
        self.sampler = PromptSampler(len(self.train_idx), tc.prompts_per_step, seed=tc.seed)
        r = cfg.rollout
        # vLLM returns sampled-token log-probs for free: logged against the trainer's (mismatch check)
        self.sampling = SamplingConfig(
            r.temperature, r.top_p, r.top_k, r.max_new_tokens, return_logprobs=r.engine == "vllm"
        )
        self.val_sampling = SamplingConfig(r.val_temperature, r.top_p, r.top_k, r.max_new_tokens)
        self.settings = UpdateSettings(
            policy_loss=self.alg.policy_loss,
            loss_options=self.alg.policy_loss_options(),
            loss_agg_mode=self.alg.loss_agg_mode,
            norm_length=self.alg.loss_norm_length or r.max_new_tokens,
            kl_loss_coef=self.alg.kl.coef if self.alg.kl.enabled and self.alg.kl.apply_as == "loss" else 0.0,
            kl_kind=self.alg.kl.type,
            temperature=r.temperature,
            micro_batch_size=tc.micro_batch_size,
            padding_free=tc.padding_free,
            max_tokens_per_micro_batch=tc.max_tokens_per_micro_batch,
            max_grad_norm=tc.max_grad_norm,
            offline_shaping=r.offline_shaping,
        )
        self.step, self.history = 0, []
        self.dropped_overlong = 0  # with data.preflight=fast
        self.reference_from_warmup = False  # the KL reference is the warmed-up policy

    # ---------------------------------------------------------------------------------------- checks
    def preflight(self, dataset: RecordDataset | None, split: str, max_count: int | None = None) -> list[int]:
        keep, lengths, skipped = preflight(
            dataset, split, self.cfg, self.processor, self.dist, self.logger.write, max_count
        )
        self.skipped_preflight += len(skipped)
        if self.dist.is_main:
            self.skip_log.write(skipped)
        if split == "train":
            self.prompt_tokens = lengths
        return keep

    def _make_engine(self):
        if self.rollout_model is not None:  # a separate copy, kept equal to the trainer's
            return make_rollout_engine(
                self.cfg, self.processor, self.rollout_model, self.dist, owns_weights=True
            )
        return make_rollout_engine(self.cfg, self.processor, self.model, self.dist)

    def sync_rollout_weights(self) -> None:
        """Push the trainer's weights to a rollout engine that holds its own copy (warm-up, resume)."""
        self.handoff.push()

    # ------------------------------------------------------------------------------------- one step
    def rl_step(self) -> dict[str, float]:
        """One step, as the README describes it: prompts and media -> rollouts -> rewards (and
        dynamic sampling) -> old and reference log-probs -> reward shaping -> advantages -> PPO
        update (the rollout engine asleep, then given the new weights)."""
        t0 = time.perf_counter()
        metrics: dict[str, float] = {}
        exp, samples, batch, t_data = self._collect_groups(metrics)
        t_rollout = time.perf_counter()
        entropy = self._logprobs(exp)
        shaped = self._shape_rewards(exp)  # with the KL coefficient this step's rollouts were made under
        metrics.update(shaped.metrics)
        metrics.update(self._update_kl_coef(exp))
        metrics.update(mismatch_metrics(exp))
        t_logp = time.perf_counter()
        exp.advantages = self._advantages(exp, shaped.rewards, batch, samples)
        metrics.update(hybrid_metrics(exp))
        metrics["actor/entropy_rollout"] = float(masked_mean(entropy, exp.mask.bool()))
        with self.handoff:  # the engine sleeps during the update and gets the new weights after it
            update = self._update(exp)
        t_end = time.perf_counter()
        times = {"data": t_data - t0, "rollout": t_rollout - t_data, "logprobs": t_logp - t_rollout}
        times.update(update=t_end - t_logp, step=t_end - t0)
        metrics = self._reduce_metrics(metrics, exp, batch, times)
        metrics.update(update)  # already global
        return metrics

    def _logprobs(self, exp: Experience) -> torch.Tensor:
        """Old (and reference) log-probs of the responses; returns the old policy's entropy."""
        mb = self.cfg.trainer.micro_batch_size
        temperature = self.sampling.temperature
        if self.vision_cache is not None:
            self.vision_cache.start(exp.batch)  # served until the update ends (_update)
        speed = dict(
            padding_free=self.settings.padding_free,
            max_tokens=self.settings.max_tokens_per_micro_batch,
            vision=self.vision_cache,
        )
        exp.old_logp, entropy = experience_logprobs(
            self.model, exp, self.engine.banned, self.dummy, temperature, mb, **speed
        )
        if self.ref_model is not None:
            exp.ref_logp, _ = experience_logprobs(
                self.ref_model, exp, self.engine.banned, self.ref_dummy, temperature, mb, **speed
            )
        elif self.kl_reference:  # LoRA: the policy itself, adapter disabled (or the warm-up's)
            snapshot = self.lora_reference if self.reference_from_warmup else None
            with reference_forward(self.model, snapshot):
                exp.ref_logp, _ = experience_logprobs(
                    self.model, exp, self.engine.banned, self.dummy, temperature, mb, **speed
                )
        return entropy

    def _shape_rewards(self, exp: Experience) -> ShapedRewards:
        """Overlong penalty and KL-in-reward on the ``overall`` scores (``algorithms/shaping.py``)."""
        return shape_rewards(
            exp.scores["overall"],
            exp.mask,
            self.alg,
            max_response_length=self.sampling.max_new_tokens,
            kl_coef=self.kl_ctl.value,
            log_prob=exp.old_logp,
            ref_log_prob=exp.ref_logp,
        )

    def _update_kl_coef(self, exp: Experience) -> dict[str, float]:
        """Feed this step's KL (totalled over ranks) to the KL controller; the loss uses its new value."""
        if not self.kl_reference:
            return {}
        kl = kl_penalty(exp.old_logp, exp.ref_logp, self.alg.kl.type, exp.mask)
        local = {"kl": float((kl * exp.mask).sum()), "tokens": float(exp.mask.sum()), "n": float(len(exp))}
        totals = sum_over_ranks(local)
        self.kl_ctl.update(totals["kl"] / max(totals["tokens"], 1.0), int(totals["n"]))
        self.settings.kl_loss_coef = self.kl_ctl.value if self.alg.kl.apply_as == "loss" else 0.0
        return {"actor/kl_coef": self.kl_ctl.value}

    def _mini_batches(self, exp: Experience) -> list[list[int]]:
        """Sequence indices of each mini-batch, PPO epoch after PPO epoch (whole groups together)."""
        groups = sorted(set(exp.prompt_of))
        per_mini = self.cfg.trainer.mini_batch_prompts // self.dist.world  # this rank's share
        mini = []
        for _ in range(self.cfg.trainer.ppo_epochs):
            for g in range(0, len(groups), per_mini):
                chosen = set(groups[g : g + per_mini])
                mini.append([i for i, p in enumerate(exp.prompt_of) if p in chosen])
        return mini

    def _update(self, exp: Experience) -> dict[str, float]:
        """The PPO epochs over mini-batches and micro-batches (metrics already global)."""
        try:
            return policy_update(
                self.model,
                self.optimizer,
                self.scheduler,
                exp,
                self._mini_batches(exp),
                self.settings,
                self.engine.banned,
                self.dummy,
                vision=self.vision_cache,
            )
        finally:
            if self.vision_cache is not None:
                self.vision_cache.stop()  # the next step's weights and media differ

    def _reduce_metrics(self, metrics: dict, exp: Experience, batch, times: dict) -> dict[str, float]:
        """The step's metrics with times, data counters and throughput, reduced over ranks
        (counts summed, rates and means averaged)."""
        metrics.update({f"time/{k}": v for k, v in times.items()})
        if self.cfg.data.preflight == "fast":
            metrics["data/dropped_overlong"] = float(self.dropped_overlong)  # so far, this rank
        # records left out so far: start-up's (counted once, on rank 0) plus this rank's since
        metrics["data/skipped_records"] = float(
            self.skipped_at_step + (self.skipped_preflight if self.dist.is_main else 0)
        )
        tokens = int(exp.mask.sum()) + int(batch.inputs["attention_mask"].sum()) * self.cfg.rollout.n
        per_rank = all_gather(tokens)  # [tokens] in one process
        if self.dist.enabled:
            metrics["perf/rank_token_imbalance"] = max(per_rank) / max(sum(per_rank) / len(per_rank), 1)
        metrics = reduce_over_ranks(metrics, summed=_COUNT_METRICS)
        metrics["perf/tokens_per_s"] = sum(per_rank) / times["step"]
        return metrics

    def _next_samples(self):
        """This rank's share of the next global batch (every rank draws it, so samplers stay in step)."""
        chosen = [self.train_idx[i] for i in self.sampler.next_batch()]
        chosen = self._my_share(chosen)
        samples = self.loadable(chosen)
        batch = encode_prompts(self.processor, samples, self.cfg.data, self.train_set.loader)
        if self.cfg.data.preflight == "fast":  # lengths were not checked at start-up: check them here
            lengths = batch.inputs["attention_mask"].sum(1).tolist()
            fits = [s for s, n in zip(samples, lengths, strict=True) if n <= self.cfg.data.max_prompt_length]
            self.dropped_overlong += len(samples) - len(fits)
            if not fits:
                raise ValueError(
                    f"every prompt of this step is longer than data.max_prompt_length="
                    f"{self.cfg.data.max_prompt_length}, e.g. {samples[0].record.problem_id}"
                )
            if len(fits) < len(samples):
                samples = fits
                batch = encode_prompts(self.processor, samples, self.cfg.data, self.train_set.loader)
        return samples, batch

    def loadable(self, chosen: list[int]) -> list:
        """The samples of ``chosen`` whose media load; the others are skipped (``skipping.py``)."""
        return loadable_samples(self, chosen)

    def _my_share(self, chosen: list[int]) -> list[int]:
        balance = self.cfg.distributed.balance_tokens
        return split_prompts(chosen, self.dist, self.prompt_tokens if balance else None)

    def _rollout(self, samples, batch) -> Experience:
        return collect(
            self.engine,
            self.processor.tokenizer,
            batch,
            samples,
            self.cfg.rollout,
            self.sampling,
            self.cfg.reward,
        )

    def _collect_groups(self, metrics: dict):
        """Rollouts for one step. With DAPO dynamic sampling, groups whose rewards carry no signal
        are dropped and new prompts are drawn, round after round, until ``prompts_per_step`` groups
        are kept or ``algorithm.online_filtering.max_tries`` rounds have run."""
        t0 = time.perf_counter()
        samples, batch = self._next_samples()
        t_data = time.perf_counter() - t0
        f = self.alg.online_filtering
        exp = self._rollout(samples, batch)
        metrics.update(exp.metrics)
        metrics.update(reward_metrics(exp))  # rewards as sampled, before any filtering
        if not f.enable:
            return exp, samples, batch, t0 + t_data
        timer = [t_data]

        def draw():
            t = time.perf_counter()
            out = self._next_samples()
            timer[0] += time.perf_counter() - t
            return out

        def encode(kept_samples):
            t = time.perf_counter()
            out = encode_prompts(self.processor, kept_samples, self.cfg.data, self.train_set.loader)
            timer[0] += time.perf_counter() - t
            return out

        target = self.cfg.trainer.prompts_per_step // self.dist.world  # this rank's share
        exp, samples, batch, filtered = filter_rounds(
            exp, samples, batch, f, target, draw, self._rollout, encode
        )
        metrics.update(filtered)
        return exp, samples, batch, t0 + timer[0]

    def _advantages(self, exp: Experience, rewards: torch.Tensor, batch, samples) -> torch.Tensor:
        """Advantages of the shaped ``rewards``, with the extra inputs the estimator declared."""
        greedy = None
        if needs_greedy_baseline(self.alg):  # e.g. ReMax: one greedy response per prompt
            greedy = self.engine.generate(
                batch, [1] * len(samples), dataclasses.replace(self.sampling, temperature=0)
            )
        return step_advantages(self.alg, exp, rewards, samples, greedy, self.cfg.reward, self.dist)

    def sft_warmup(self) -> bool:
        if not sft_warmup(self, self.dist):
            return False
        # KL should hold the policy near where RL starts, not pull it back to the cold start
        # the warm-up just left
        if self.ref_model is not None:
            self.ref_model.load_state_dict(self.model.state_dict())
            self.reference_from_warmup = True
        elif self.lora_reference is not None:  # LoRA: the warmed-up adapter, on the same base
            copy_adapter(self.model, self.lora_reference)
            self.reference_from_warmup = True
        return True

    def validate(self, probes: bool = False) -> dict[str, float]:
        """Validation metrics; with ``probes``, the video probes too (``trainer/evaluate.py``)."""
        return validate_policy(self, probes)

    # ----------------------------------------------------------------------------------- the loop
    def _resume(self) -> None:
        resume(self)  # newest whole checkpoint, changed settings applied or refused, logs rolled back

    def save(self) -> None:
        save_checkpoint(
            self.cfg.trainer.output_dir,
            self.step,
            self.model,
            self.processor,
            self.optimizer,
            self.scheduler,
            {
                "sampler": self.sampler.state_dict(),
                "history": self.history,
                "reference_from_warmup": self.reference_from_warmup,
                "settings": run_settings(self.cfg),  # compared on resume
            },
            keep_last=self.cfg.trainer.keep_last,
            state=self.dist,
            reference=self.reference_state() if self.reference_from_warmup else None,
            export_merged=self.cfg.trainer.export_merged,
        )

    def reference_state(self):
        """What a checkpoint saves of a reference taken after the warm-up (and a resume loads):
        the reference model, or with LoRA the warmed-up adapter snapshot."""
        return self.ref_model if self.ref_model is not None else self.lora_reference

    def train(self) -> dict[str, float]:
        tc = self.cfg.trainer
        probing = tc.video_probe_every > 0
        if probing and not self.val_idx:
            raise ValueError(
                "trainer.video_probe_every needs validation prompts: set data.val_files and "
                "trainer.val_size > 0 (or trainer.video_probe_every=0)"
            )
        if probing and self.dist.is_main and not any(has_video(self.val_set, i) for i in self.val_idx):
            self.logger.write("trainer.video_probe_every: no validation prompt has a video; nothing to probe")
        self._resume()
        if self.step == 0:
            # how much of the model trains (LoRA: the adapters' share), in metrics.jsonl at step 0
            self.logger.log(0, {"model/trainable_fraction": self.trainable_fraction})
            self.logger.write(f"trainable parameters: {100 * self.trainable_fraction:.3f}% of the model")
            before = self.validate(probes=probing)
            self.history.append({"step": 0, **before})
            self.logger.log(0, before)
            if self.sft_warmup():
                warm = {f"{k}_after_warmup": v for k, v in self.validate(probes=probing).items()}
                self.history.append({"step": 0, **warm})
                self.logger.log(0, warm)
        while self.step < tc.max_steps:
            metrics = self.rl_step()
            self.step += 1
            probe_now = probing and self.step % tc.video_probe_every == 0
            val_now = (tc.val_every and self.step % tc.val_every == 0) or probe_now
            if val_now and self.step < tc.max_steps:
                metrics.update(self.validate(probes=probe_now))
            self.history.append(
                {
                    "step": self.step,
                    **{k: v for k, v in metrics.items() if "/" in k and k.split("/")[0] in ("reward", "val")},
                }
            )
            self.logger.log(
                self.step, metrics, ("reward/overall", "reward/accuracy", "val/accuracy", "val/video_gap")
            )
            if tc.save_every and self.step % tc.save_every == 0:
                self.save()
        final = self.validate(probes=probing)
        self.logger.log(self.step, final)
        self.history.append({"step": self.step, **final})
        self.save()  # (re)saves the last step with the final validation in its history
        self.logger.close()
        return final

    def close(self) -> None:
        """Release the models and leave the process group (see ``shutdown_distributed``)."""
        if self.engine is not None:
            self.engine.close()  # a vLLM engine tears down its groups while the process group lives
        self.model = self.ref_model = self.rollout_model = self.optimizer = self.engine = None
        self.lora_reference = None
        self.handoff = None
        self.dummy = self.ref_dummy = None
        shutdown_distributed()
