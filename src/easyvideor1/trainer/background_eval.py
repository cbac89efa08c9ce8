"""Benchmark evaluation while training runs (``trainer.eval``).

Every ``every`` steps (and at the last step) the trainer writes the current weights as a plain
Hugging Face model directory under ``<output_dir>/eval/step_<N>/model`` (a collective, like a
checkpoint) and rank 0 starts ``easyvideor1 eval`` on it in a child process, niced and with its
own thread count (on GPUs: on ``trainer.eval.devices``). The training loop does not wait: after
each step it looks (without blocking) for evaluations that have finished and logs their scores
as ``eval/<benchmark>/<metric>`` at the step they evaluated, into ``metrics.jsonl``,
TensorBoard and wandb. At the end of training it waits for those still running.

Each step's directory says how far it got: ``results.json`` (the eval finished), ``logged.json``
(its scores were logged). A resumed run therefore never evaluates a step twice: a finished
evaluation of a step at or before the checkpoint is logged if it was not yet, an unfinished one is
started again (``eval`` resumes from its own predictions), and the directories of steps after the
checkpoint (weights the resumed run will train anew) are removed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..config_loading import to_yaml
from ..errors import ConfigError
from ..outdir import make_dir, open_append, refuse_link, write_text_atomic
from .config import TrainingEvalConfig


@dataclass
class _Running:
    step: int
    process: subprocess.Popen
    log: Any  # the open eval.log


class BackgroundEvals:
    """The evaluations of one run (rank 0 starts, watches and logs them; every rank exports)."""

    def __init__(self, cfg, parts):
        self.cfg, self.parts = cfg, parts
        self.settings: TrainingEvalConfig = cfg.trainer.eval
        self.root = Path(cfg.trainer.output_dir) / "eval"
        self.running: dict[int, _Running] = {}
        if self.enabled and parts.dist.is_main:
            self.check()

    def check(self) -> None:
        """Refuse at start-up what the evaluation would fail on at its first step: no benchmark,
        an unknown one, a missing annotation or records file."""
        from ..evaluation.commands import EvalInputError, load_inputs, resolve_benchmarks

        run = _eval_run_config(self.cfg)
        try:
            load_inputs(resolve_benchmarks(run.eval, run.data.prompt_template), run.eval)
        except EvalInputError as e:
            raise ConfigError(f"trainer.eval (or the eval section it reads): {e}") from None

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def due(self, step: int) -> bool:
        every = self.settings.every
        return bool(every) and (step % every == 0 or step == self.cfg.trainer.max_steps)

    # ------------------------------------------------------------------------------ starting
    def start(self, step: int) -> None:
        """Export this step's weights (every rank) and start its evaluation (rank 0). Returns at once."""
        from .checkpoint import export_model

        parts = self.parts
        if parts.dist.is_main:  # a link planted at eval/ or eval/step_N is refused, not written through
            refuse_link(self.root)
            make_dir(self.root / f"step_{step}")
        model_dir = export_model(
            parts.model, parts.processor, self.root / f"step_{step}" / "model", parts.dist
        )
        if parts.dist.is_main:
            self._launch(step, model_dir)

    def _launch(self, step: int, model_dir: Path) -> None:
        s = self.settings
        step_dir = model_dir.parent
        run = _eval_run_config(self.cfg)
        config_path = step_dir / "config.yaml"
        write_text_atomic(config_path, to_yaml(run))
        env = {**os.environ, "OMP_NUM_THREADS": str(s.threads), "TOKENIZERS_PARALLELISM": "false"}
        env.pop("EASYVIDEOR1_THREADS", None)
        for key in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
            env.pop(key, None)  # the eval is a process of its own, not a rank of this group
        if s.devices:
            env["CUDA_VISIBLE_DEVICES"] = s.devices
        command = [
            sys.executable,
            "-m",
            "easyvideor1",
            "eval",
            "--model",
            str(model_dir),
            "--out",
            str(step_dir / "results"),
            f"config={config_path}",
            f"cpu.threads={s.threads}",
        ]
        log = open_append(step_dir / "eval.log")
        nice = s.nice
        process = subprocess.Popen(
            command,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            preexec_fn=(lambda: os.nice(nice)) if nice else None,
        )
        self.running[step] = _Running(step, process, log)
        self.parts.logger.write(f"eval of step {step} started in the background ({step_dir / 'eval.log'})")

    # ------------------------------------------------------------------------------ finishing
    def poll(self) -> None:
        """Log every evaluation that has finished (never waits)."""
        for run in list(self.running.values()):
            if run.process.poll() is not None:
                self._finished(run)

    def wait(self) -> None:
        """Wait for every evaluation still running and log it (the end of training)."""
        for step in sorted(self.running):
            run = self.running[step]
            self.parts.logger.write(f"waiting for the eval of step {step}")
            run.process.wait()
            self._finished(run)

    def _finished(self, run: _Running) -> None:
        del self.running[run.step]
        run.log.close()
        step_dir = self.root / f"step_{run.step}"
        if run.process.returncode != 0:
            self.parts.logger.write(
                f"eval of step {run.step} failed (exit code {run.process.returncode}): see {step_dir / 'eval.log'}"
            )
            self.parts.logger.log(run.step, {"eval/failed": 1.0})
            self._drop_weights(step_dir)  # a failed evaluation is not run again
            return
        self._log(run.step)

    def _drop_weights(self, step_dir: Path) -> None:
        """Remove a step's exported model once its evaluation is over (``keep_weights`` keeps it)."""
        if not self.settings.keep_weights:
            shutil.rmtree(step_dir / "model", ignore_errors=True)

    def _log(self, step: int) -> None:
        step_dir = self.root / f"step_{step}"
        metrics = eval_metrics(json.loads((step_dir / "results" / "results.json").read_text()))
        metrics["eval/seconds"] = _seconds(step_dir)
        self.parts.logger.log(step, metrics, late=True)
        logged = {"step": step, "metrics": metrics, "logged_at": time.time()}
        write_text_atomic(step_dir / "logged.json", json.dumps(logged))
        self._drop_weights(step_dir)

    # -------------------------------------------------------------------------------- resume
    def recover(self, step: int) -> None:
        """After resuming at ``step``: log finished evaluations not yet logged, start unfinished
        ones again, and remove those of later steps (rank 0)."""
        if not self.parts.dist.is_main or not self.root.is_dir():
            return
        for path in sorted(self.root.glob("step_*")):
            n = path.name[5:]
            if not n.isdigit():
                continue
            k = int(n)
            if k > step:
                shutil.rmtree(path, ignore_errors=True)
            elif (path / "logged.json").exists():
                continue
            elif (path / "results" / "results.json").exists():
                self._log(k)
            elif (path / "model").is_dir():
                self._launch(k, path / "model")
            else:
                self.parts.logger.write(
                    f"eval of step {k} never finished and its weights are gone: not evaluated"
                )

    def close(self) -> None:
        """Stop evaluations still running (a run that failed: their steps are resumed later)."""
        for run in self.running.values():
            run.process.terminate()
            try:
                run.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                run.process.kill()
            run.log.close()
        self.running.clear()


def _eval_run_config(cfg):
    """The run config the evaluation process reads: the run's, with ``trainer.eval`` applied to
    its ``eval`` section."""
    import copy

    s = cfg.trainer.eval
    run = copy.deepcopy(cfg)
    if s.benchmarks or s.data:
        run.eval.benchmarks, run.eval.data = list(s.benchmarks), list(s.data)
    if s.engine:
        run.eval.engine = s.engine
    if s.max_samples:
        run.eval.max_samples = s.max_samples
    run.trainer.eval = TrainingEvalConfig()  # the evaluation does not evaluate in turn
    run.demo.prepare = False
    return run


def eval_metrics(results: dict[str, dict]) -> dict[str, float]:
    """``eval/<benchmark>/<metric>`` (and its sample counts) from an eval's ``results.json``."""
    out: dict[str, float] = {}
    for name, r in results.items():
        if r.get("score") is not None:
            out[f"eval/{name}/{r.get('metric', 'accuracy')}"] = float(r["score"])
        for key in ("evaluated", "failures", "not_scored"):
            if isinstance(r.get(key), (int, float)):
                out[f"eval/{name}/{key}"] = float(r[key])
    return out


def _seconds(step_dir: Path) -> float:
    """How long the evaluation took: from its config file to its results."""
    start = (step_dir / "config.yaml").stat().st_mtime
    return max(0.0, (step_dir / "results" / "results.json").stat().st_mtime - start)
