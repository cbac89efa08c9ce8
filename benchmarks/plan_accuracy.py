"""The memory planner (``easyvideor1 plan``) against the peaks measured on this CPU: for three model
sizes (the tiny model, 46M and 139M parameters) and three prompt + response lengths (267 to 2,680
prompt tokens, 4 x 128 to 8 x 384 response tokens, three micro-batch layouts), the predicted
peak of the old-log-prob pass and of the update against the measured peak of the same run.

A case is one run config (``model.path``, ``model.gradient_checkpointing=true``, the video's
frames and pixels, ``data.max_prompt_length`` = the prompt's real token count, ``rollout.n``,
``rollout.max_new_tokens`` = every response's length, the micro-batch keys; float32, no
reference model) and what the trainer builds from it (``trainer/build.py``: the policy with its
vision tower trained, the dummy vision pass, the packing, AdamW). It runs in a fresh process with
one thread and ``MALLOC_MMAP_THRESHOLD_=65536`` (every tensor above 64 KiB is its own mapping,
returned to the system when freed, so the resident set follows the live tensors). Step 1 (the
old-log-prob pass and one update over every sequence; it creates AdamW's state) warms up; in step
2 each pass is measured: the peak (``VmHWM``) is reset through ``/proc/self/clear_refs`` and the
resident set read before it, the peak read after. Measured peak = the model states alive before
the pass (parameters, gradients, AdamW's state: the bytes of those tensors, counted from the
objects) + (peak - resident set before). Predicted peak: ``plan(cfg, Hardware(gpus=1,
device="cpu"))``'s phases ``logprobs`` and ``update``. Transient = peak - the model states the
pass holds at its peak (predicted: the ``weights``, ``gradients`` and ``optimizer`` parts;
measured: parameters, AdamW's state and, in the update, a gradient per trainable parameter).

Printed: a table (stderr) and one JSON line: ``max_rel_error`` (the largest |predicted - measured|
/ measured over the cases' peaks), ``max_rel_error_transient`` (the same over the transients) and
``cases`` (one entry per case and pass). Usage: python benchmarks/plan_accuracy.py [--smoke] [--sizes tiny,middle,large] [--parts]
(``--smoke``: the tiny model, one 8-frame 64x64 video and two 16-token responses; about 12 s).
The full run takes about 11 minutes on one core.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))  # this checkout's package, not an installed copy

RESULT_KEYS = ("max_rel_error", "max_rel_error_transient", "cases")
GIB = 2**30
PASSES = ("logprobs", "update")
MODEL_STATES = ("weights", "gradients", "optimizer")  # the plan's resident parts of a phase


@dataclass(frozen=True)
class Size:
    """A Qwen3-VL-architecture model: the tiny model's vision tower, this language model."""

    name: str
    hidden: int
    layers: int
    text_fields: dict = field(default_factory=dict)  # over the tiny text config's (heads, MLP, vocabulary)


@dataclass(frozen=True)
class Length:
    """One video prompt (``frames`` random frames of ``side`` x ``side``) and ``n`` responses of
    ``tokens`` tokens each, laid out in micro-batches by ``layout`` (trainer keys)."""

    frames: int
    side: int
    n: int
    tokens: int
    layout: dict

    def layout_name(self) -> str:
        return ",".join(f"{k.removeprefix('trainer.')}={v}" for k, v in self.layout.items())


def _text(heads: int, kv_heads: int, mlp: int, vocab: int) -> dict:
    # heads of 64: M-RoPE's 32 frequencies split t/h/w as the released Qwen3-VL's
    return dict(
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=64,
        intermediate_size=mlp,
        vocab_size=vocab,
        max_position_embeddings=32768,
        rope_parameters={
            "rope_type": "default",
            "rope_theta": 5e6,
            "mrope_section": [12, 10, 10],
            "mrope_interleaved": True,
        },
    )


SIZES = (
    Size("tiny", 128, 2),
    Size("middle", 512, 4, _text(8, 4, 1408, 32768)),
    Size("large", 768, 6, _text(12, 4, 2048, 65536)),
)
# every case runs two micro-batches per mini-batch, as a real step runs many: from the second on,
# the gradients are held through the forward (a single micro-batch would make its forward before them)
PADDED = {"trainer.padding_free": False, "trainer.shared_prefix": "off"}
LENGTHS = (
    Length(16, 128, 4, 128, {**PADDED, "trainer.micro_batch_size": 2}),
    Length(32, 256, 4, 512, {"trainer.padding_free": True, "trainer.shared_prefix": "auto", "trainer.micro_batch_size": 2}),
    # a token budget of the prompt (2,680 tokens) and half the group: two shared-prefix micro-batches
    Length(48, 320, 8, 384, {"trainer.padding_free": True, "trainer.shared_prefix": "auto", "trainer.max_tokens_per_micro_batch": 2688 + 4 * 384}),
)  # fmt: skip
SMOKE_LENGTH = Length(8, 64, 2, 16, {**PADDED, "trainer.micro_batch_size": 2})


@dataclass(frozen=True)
class Case:
    """One measured run: its size, its length and the run config's overrides."""

    size: str
    params: int
    prompt_tokens: int
    length: Length
    overrides: list[str]


def make_model(out: Path, size: Size) -> tuple[str, int]:
    """The size's model directory (random weights, the tiny tokenizer and processor) and its
    parameter count."""
    import torch  # noqa: F401  (transformers' model classes)
    from transformers import AutoConfig

    from easyvideor1.models.tiny import make_tiny_model

    path = make_tiny_model(
        str(out / size.name), hidden=size.hidden, layers=size.layers, text_fields=size.text_fields
    )
    return path, parameter_count(AutoConfig.from_pretrained(path))


def parameter_count(config) -> int:
    """Parameters of the model ``config`` describes (built on the meta device: no memory)."""
    import torch
    from transformers import AutoModelForImageTextToText

    with torch.device("meta"):
        model = AutoModelForImageTextToText.from_config(config)
    return sum(p.numel() for p in model.parameters())


def make_record(out: Path, length: Length) -> str:
    """A records file of one video prompt: ``length.frames`` random frames at 2 fps."""
    import numpy as np

    from easyvideor1.media.encode import encode_video

    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    side = length.side
    encode_video(
        str(out / "video.mp4"),
        [rng.integers(0, 255, (side, side, 3), dtype=np.uint8) for _ in range(length.frames)],
        2.0,
    )
    record = {"problem_id": "video", "videos": [str(out / "video.mp4")], "problem": "What happens in the video?",
              "problem_type": "multiple choice", "answer": "A", "options": ["A. yes", "B. no"]}  # fmt: skip
    (out / "records.jsonl").write_text(json.dumps(record) + "\n")
    return str(out / "records.jsonl")


def run_overrides(model_dir: str, records: str, length: Length, work: Path) -> list[str]:
    """The run config of a case, but for ``data.max_prompt_length`` (:func:`prompt_tokens`)."""
    pixels = length.side**2
    keys = {
        "model.path": model_dir,
        "model.gradient_checkpointing": True,
        "data.train_files": f"[{records}]",
        "data.video_fps": "null",  # a fixed frame count instead of the default rate
        "data.video_nframes": length.frames,
        "data.video_min_pixels": pixels,
        "data.video_max_pixels": pixels,
        "rollout.n": length.n,
        "rollout.max_new_tokens": length.tokens,
        "trainer.prompts_per_step": 1,
        "trainer.mini_batch_prompts": 1,
        "trainer.loggers": "[]",
        "trainer.output_dir": str(work / "run"),
        **length.layout,
    }
    return [f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in keys.items()]


def run_config(overrides: list[str]):
    from easyvideor1.config import load_config
    from easyvideor1.resolve import resolve_config

    return resolve_config(load_config(overrides=overrides))


def prompt_batch(cfg, processor):
    """The encoded prompt batch of the run's one record, as the trainer's data path encodes it."""
    from easyvideor1.data.dataset import RecordDataset, encode_prompts

    dataset = RecordDataset.from_files(cfg.data.train_files, cfg.data)
    return encode_prompts(processor, [dataset[0]], dataset.cfg, dataset.loader)


def prompt_tokens(overrides: list[str]) -> int:
    """The record's prompt length in tokens (media placeholders included)."""
    from transformers import AutoProcessor

    cfg = run_config(overrides)
    batch = prompt_batch(cfg, AutoProcessor.from_pretrained(cfg.model.path))
    return int(batch.inputs["attention_mask"].sum())


def predict(overrides: list[str]) -> dict[str, tuple[float, float, str]]:
    """Each pass's predicted (peak, transient) in GiB, and what the peak was planned for."""
    from easyvideor1.plan import Hardware, plan

    p = plan(run_config(overrides), Hardware(gpus=1, memory_gib=24.0, device="cpu"), fixes=False)
    out = {}
    for name in PASSES:
        phase = p.phase(name)
        states = sum(phase.parts_gib.get(k, 0.0) for k in MODEL_STATES)
        out[name] = (phase.peak_gib, phase.peak_gib - states, phase.detail)
    return out


def predicted_parts(overrides: list[str]) -> dict[str, dict[str, float]]:
    """Each pass's predicted parts in GiB (``--parts``)."""
    from easyvideor1.plan import Hardware, plan

    p = plan(run_config(overrides), Hardware(gpus=1, memory_gib=24.0, device="cpu"), fixes=False)
    return {name: {k: round(v, 4) for k, v in p.phase(name).parts_gib.items()} for name in PASSES}


@dataclass(frozen=True)
class Measured:
    """One pass's memory in bytes: its peak (the model states alive before it plus its peak
    resident set above the resident set before it) and the model states it holds at its peak."""

    peak: int
    states: int
    tokens: int  # the language-model tokens of the run's largest forward

    @property
    def transient(self) -> int:
        return self.peak - self.states


def _status_bytes(field_name: str) -> int:
    for line in open("/proc/self/status"):
        if line.startswith(field_name + ":"):
            return int(line.split()[1]) * 1024  # kB
    raise RuntimeError(f"no {field_name} in /proc/self/status")


def _bytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def measured(run, model, optimizer, backward: bool, tokens: int) -> Measured:
    """``run()``'s memory. The model states, counted from the objects: the parameters, AdamW's
    state, and the gradients: those alive before the pass, or with ``backward`` one per trainable
    parameter (the update frees them after its optimizer step and its backward makes them again)."""
    import torch

    params = list(model.parameters())
    moments = _bytes(t for state in optimizer.state.values() for t in state.values() if torch.is_tensor(t))
    grads = _bytes(p.grad for p in params if p.grad is not None)
    held = _bytes(p for p in params if p.requires_grad) if backward else grads
    with open("/proc/self/clear_refs", "w") as f:  # the peak (VmHWM) starts again from here
        f.write("5")
    before = _status_bytes("VmRSS")
    run()
    alive = _bytes(params) + moments + grads
    return Measured(alive + _status_bytes("VmHWM") - before, _bytes(params) + moments + held, tokens)


def worker(overrides: list[str]) -> dict[str, Measured]:
    """Two steps of the run: the second's passes measured."""
    import torch

    from _step_profile import random_experience  # a helper next to this script
    from easyvideor1.trainer.build import build_components, step_settings
    from easyvideor1.trainer.distributed import init_distributed
    from easyvideor1.trainer.step import mini_batches
    from easyvideor1.trainer.update import (
        experience_logprobs,
        forward_tokens,
        policy_update,
        split_micro_batches,
    )

    torch.set_num_threads(1)
    cfg = run_config(overrides)
    parts = build_components(cfg, init_distributed(cfg.distributed))
    r, tc = cfg.rollout, cfg.trainer
    gen = torch.Generator().manual_seed(0)
    exp = random_experience(
        prompt_batch(cfg, parts.processor), [0] * r.n, r.max_new_tokens, r.max_new_tokens, gen
    )
    minis = mini_batches(exp.prompt_of, tc.mini_batch_prompts, tc.ppo_epochs)
    settings = step_settings(cfg).update
    packing = parts.forward.packing
    tokens = max(forward_tokens(exp, idx, packing) for idx in split_micro_batches(exp, minis[0], packing))

    def logprobs():
        exp.old_logp, _ = experience_logprobs(parts.forward, exp)

    def update():
        policy_update(parts.forward, parts.optimizer, parts.scheduler, exp, minis, settings)

    logprobs()  # step 1: creates AdamW's state and every lazily built buffer
    update()
    # step 2, measured (in this order: the update's old log-probs are this step's)
    return {
        "logprobs": measured(logprobs, parts.model, parts.optimizer, False, tokens),
        "update": measured(update, parts.model, parts.optimizer, True, tokens),
    }


def measure(case: Case, work: Path) -> dict[str, Measured]:
    """The case's passes measured in a fresh one-thread process."""
    out = work / "measured.json"
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536", "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", json.dumps(case.overrides), str(out)]
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode:
        raise RuntimeError(f"case {case.size} {case.length} failed:\n{r.stderr[-3000:]}")
    return {name: Measured(**m) for name, m in json.loads(out.read_text()).items()}


def rows_of(case: Case, work: Path) -> list[dict]:
    """The case's JSON rows: one per pass, predicted and measured (GiB)."""
    predicted, meas = predict(case.overrides), measure(case, work)
    rows = []
    for name in PASSES:
        rows.append({
            "size": case.size,
            "params": case.params,
            "prompt_tokens": case.prompt_tokens,
            "responses": f"{case.length.n}x{case.length.tokens}",
            "layout": case.length.layout_name(),
            "pass": name,
            "predicted_gib": predicted[name][0],
            "measured_gib": meas[name].peak / GIB,
            "predicted_transient_gib": predicted[name][1],
            "measured_transient_gib": meas[name].transient / GIB,
            # what the planner's peak was planned for (the worst micro-batch the settings allow)
            # beside the run's largest forward
            "planned_for": predicted[name][2],
            "largest_forward_tokens": meas[name].tokens,
        })  # fmt: skip
    return rows


def rel_error(rows: list[dict], predicted: str, measured: str) -> float:
    return max(abs(r[predicted] - r[measured]) / r[measured] for r in rows)


HEADER = (
    f"{'size':<7}{'params':>12}{'prompt':>7}{'responses':>10}  {'pass':<9}{'peak GiB pred / meas':>22}"
    f"{'error':>7}{'transient GiB pred / meas':>28}{'error':>7}  layout"
)


def table_lines(rows: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        peak, tr = (
            (r["predicted_gib"], r["measured_gib"]),
            (r["predicted_transient_gib"], r["measured_transient_gib"]),
        )
        lines.append(
            f"{r['size']:<7}{r['params']:>12,}{r['prompt_tokens']:>7}{r['responses']:>10}  {r['pass']:<9}"
            f"{peak[0]:>11.3f} / {peak[1]:<8.3f}{(peak[0] - peak[1]) / peak[1]:>+7.0%}"
            f"{tr[0]:>17.3f} / {tr[1]:<8.3f}{(tr[0] - tr[1]) / tr[1]:>+7.0%}  {r['layout']}; "
            f"planned for {r['planned_for']}; the run's largest forward {r['largest_forward_tokens']:,} tokens"
        )
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--smoke", action="store_true", help="the tiny model, one short case (seconds)")
    ap.add_argument("--sizes", help="comma-separated size names to run (default: all)")
    ap.add_argument("--parts", action="store_true", help="print each prediction's parts (GiB)")
    ap.add_argument("--worker", nargs=2, metavar=("OVERRIDES", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.worker:
        figures = worker(json.loads(args.worker[0]))
        Path(args.worker[1]).write_text(json.dumps({name: asdict(m) for name, m in figures.items()}))
        return 0
    sizes, lengths = (SIZES[:1], (SMOKE_LENGTH,)) if args.smoke else (SIZES, LENGTHS)
    if args.sizes:
        sizes = tuple(s for s in sizes if s.name in args.sizes.split(","))
    rows = []
    print(HEADER, file=sys.stderr)  # each case's rows as it finishes, then the whole table
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        records = [make_record(work / f"video{i}", length) for i, length in enumerate(lengths)]
        for size in sizes:
            model_dir, params = make_model(work / "models", size)
            for length, record in zip(lengths, records, strict=True):
                overrides = run_overrides(model_dir, record, length, work)
                tokens = prompt_tokens(overrides)
                # every prompt of the case is this long: the longest and the shortest the plan assumes
                overrides += [f"data.max_prompt_length={tokens}", f"plan.min_prompt_tokens={tokens}"]
                case_rows = rows_of(Case(size.name, params, tokens, length, overrides), work)
                if args.parts:
                    print(json.dumps(predicted_parts(overrides)), file=sys.stderr)
                print("\n".join(table_lines(case_rows)), file=sys.stderr, flush=True)
                rows += case_rows
    print("\n".join(["", HEADER, *table_lines(rows)]), file=sys.stderr)
    result = {
        "max_rel_error": rel_error(rows, "predicted_gib", "measured_gib"),
        "max_rel_error_transient": rel_error(rows, "predicted_transient_gib", "measured_transient_gib"),
        "cases": rows,
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
