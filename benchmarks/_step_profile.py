"""The realistic-profile training step (issue 13 part 2): padded vs packed, fixed vs token-budget
micro-batches, re-encoded vs reused vision features, all on vs all off, with peak memory.

Profile: a tiny Qwen3-VL whose vision tower takes about a quarter of a video prompt's forward time
(as for Qwen3-VL-8B; measured and printed), a batch of videos of 8 to 64 frames (64x64, real
PyAV files through the training data path) mixed with text-only prompts, ``n`` responses each of
varying length. The step timed is the part the switches act on: old and reference log-probs, then
the PPO update (the rollout is the same whatever the switches, and is not run here). Each variant
runs in its own process (a warm-up step, then timed steps; the fastest is reported), so its peak
memory is its own. On a GPU steps are timed by the wall clock; on the CPU by the CPU time of one
thread (a shared machine's wall clock measures its other load). Peak memory:
``torch.cuda.max_memory_allocated`` on a GPU, else the peak resident set size above the
process's size before the first step. A helper of ``benchmarks/train_step.py --profile realistic``
(the leading underscore keeps it out of ``make bench`` and the benchmark smoke test).
"""

from __future__ import annotations

import copy
import json
import random
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

VARIANTS = {  # name: (padding_free, token budget, reuse vision features)
    "all off": (False, False, False),
    "packed": (True, False, False),
    "token budget": (False, True, False),
    "reused vision": (False, False, True),
    "all on": (True, True, True),
}
FRAMES = (8, 16, 24, 32, 48, 64)
REALISTIC_KEYS = (
    "realistic_all_on_vs_off",
    "realistic_packed_vs_padded",
    "realistic_token_budget_vs_fixed",
    "realistic_reused_vs_reencoded_vision",
    "realistic_peak_mib_all_on",
    "realistic_peak_mib_all_off",
    "realistic_vision_share",
    "realistic_padding_fraction",
)
SMOKE_FRAMES = (8,)  # --smoke: one short video, the same variants and keys
MICRO_BATCH = 4  # sequences per micro-batch when fixed
N_RESPONSES = 4
SIDE = 64  # frame side in pixels: 2x2 merged tokens per temporal patch (CPU-sized)


def make_assets(out: Path, frames=FRAMES, n_text: int = 3, seed: int = 0) -> tuple[str, str]:
    """The tiny model and the records (videos of 8..64 frames at 2 fps, and text-only prompts)."""
    import numpy as np
    import torch
    from transformers import AutoModelForImageTextToText

    from easyvideor1.media.encode import encode_video
    from easyvideor1.models.families import QWEN_SPECIAL_TOKENS
    from easyvideor1.models.tiny import build_processor, tiny_config

    processor = build_processor("qwen3_vl")
    tok = processor.tokenizer
    ids = {t: tok.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    # a 4-layer 192-wide language model and a 1-block 64-wide tower: the tower's share of a
    # 64-frame prompt's forward is about a quarter (measured and printed), as for Qwen3-VL-8B
    config = tiny_config("qwen3_vl", len(tok), ids, hidden=192, layers=4)
    vision = config.vision_config
    vision.depth, vision.hidden_size, vision.intermediate_size = 1, 64, 128
    vision.deepstack_visual_indexes = [0]
    torch.manual_seed(seed)
    model = AutoModelForImageTextToText.from_config(config)
    model_dir = out / "model"
    model.save_pretrained(model_dir)
    processor.save_pretrained(model_dir)
    rng = np.random.default_rng(seed)
    rows = []
    (out / "videos").mkdir(parents=True, exist_ok=True)
    for i, n in enumerate(frames):
        pixels = [rng.integers(0, 255, (SIDE, SIDE, 3), dtype=np.uint8) for _ in range(n)]
        path = out / "videos" / f"v{i}.mp4"
        encode_video(str(path), pixels, 2.0)
        rows.append({"problem_id": f"video{n}", "videos": [str(path)], "problem": "What happens?"})
    for i in range(n_text):
        rows.append({"problem_id": f"text{i}", "problem": "Add the numbers 1 2 3 4 5. " * (1 + i)})
    for r in rows:
        r.update(problem_type="multiple choice", answer="A", options=["A. yes", "B. no"])
    records = out / "records.jsonl"
    records.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(model_dir), str(records)


def random_experience(batch, prompt_of: list[int], shortest: int, longest: int, gen):
    """An experience of ``batch``'s prompts: a response of ``shortest`` to ``longest`` random
    (non-special) token ids per entry of ``prompt_of``, random advantages."""
    import torch

    from easyvideor1.trainer.experience import Experience, pad_stack

    rows = []
    for _ in prompt_of:
        n = int(torch.randint(shortest, longest + 1, (1,), generator=gen))
        rows.append(torch.randint(64, 400, (n,), generator=gen))  # no special token ids
    ids = pad_stack(rows, 0)
    mask = pad_stack([torch.ones(len(r), dtype=torch.long) for r in rows], 0)
    n = len(rows)
    return Experience(
        batch=batch,
        prompt_of=list(prompt_of),
        ids=ids,
        mask=mask,
        texts=[""] * n,
        offline=torch.zeros(n, dtype=torch.bool),
        truncated=torch.zeros(n, dtype=torch.bool),
        scores={},
        tasks=[""] * n,
        advantages=torch.randn(n, 1, generator=gen) * mask.float(),
    )


def build_experience(model_dir: str, records: str, seed: int = 0):
    """The step's experience: every prompt with N_RESPONSES random responses of 8..32 tokens."""
    import torch

    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.dataset import RecordDataset, encode_prompts
    from easyvideor1.models.loading import load_policy
    from easyvideor1.resolve import resolve_data

    model, processor = load_policy(model_dir, freeze_vision_tower=True)
    cfg = DataConfig(
        video_fps=2.0, video_max_frames=64, video_min_pixels=SIDE * SIDE, video_max_pixels=SIDE * SIDE
    )
    dataset = RecordDataset.from_files([records], resolve_data(cfg, model_dir))
    samples = [dataset[i] for i in range(len(dataset))]
    random.Random(seed).shuffle(samples)  # text and videos mixed within micro-batches
    batch = encode_prompts(processor, samples, dataset.cfg, dataset.loader)
    gen = torch.Generator().manual_seed(seed)
    prompt_of = [p for p in range(len(samples)) for _ in range(N_RESPONSES)]
    exp = random_experience(batch, prompt_of, 8, 32, gen)
    return model, processor, exp


def padding_fraction(exp) -> float:
    """Share of padding in the fixed-count padded micro-batches (what the padded forwards compute)."""
    width = exp.batch.inputs["input_ids"].shape[1]
    real = total = 0
    for start in range(0, len(exp), MICRO_BATCH):
        idx = list(range(start, min(start + MICRO_BATCH, len(exp))))
        resp = exp.mask[idx].sum(1)
        prompt = exp.batch.inputs["attention_mask"][[exp.prompt_of[i] for i in idx]].sum(1)
        real += int((resp + prompt).sum())
        total += len(idx) * (width + int(resp.max()))
    return 1 - real / total


def vision_share(model, exp) -> float:
    """Share of the vision tower in the forward of the longest video prompt (no gradient)."""
    import torch

    from easyvideor1.models.inputs import gather_prompts

    p = max(range(len(exp.batch)), key=lambda q: int(exp.batch.inputs["attention_mask"][q].sum()))
    inputs = gather_prompts(exp.batch, [p])
    tower_time = []

    def pre(*_):
        tower_time.append(-time.perf_counter())

    def post(*_):
        tower_time[-1] += time.perf_counter()

    tower = model.model.visual
    hooks = [tower.register_forward_pre_hook(pre), tower.register_forward_hook(post)]
    shares = []
    with torch.no_grad():
        for _ in range(3):
            tower_time.clear()
            t0 = time.perf_counter()
            model(**inputs, use_cache=False, logits_to_keep=1)
            shares.append(sum(tower_time) / (time.perf_counter() - t0))
    for h in hooks:
        h.remove()
    return sorted(shares)[1]


def run_variant(name: str, model_dir: str, records: str, steps: int) -> dict:
    """Time ``steps`` steps (after a warm-up one) of the variant ``name``; returns its figures."""
    import torch

    from easyvideor1.models.logprobs import Packing, PolicyForward
    from easyvideor1.models.vision import DummyVisionPass
    from easyvideor1.models.vision_cache import VisionFeatureCache
    from easyvideor1.rollout.base import banned_token_ids
    from easyvideor1.trainer.update import UpdateSettings, experience_logprobs, policy_update

    padding_free, budget, reuse = VARIANTS[name]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        # one thread, timed by its CPU time: on a shared machine wall time measures the neighbours
        torch.set_num_threads(1)
    model, processor, exp = build_experience(model_dir, records)
    model.to(device).train()
    ref = copy.deepcopy(model).eval().requires_grad_(False)
    dummy, banned = DummyVisionPass(model), banned_token_ids(processor.tokenizer)
    cache = VisionFeatureCache([model, ref]) if reuse else None
    # the budget holds about as many real tokens as a fixed micro-batch holds on average
    lengths = exp.batch.inputs["attention_mask"].sum(1)[exp.prompt_of] + exp.mask.sum(1)
    tokens = int(lengths.float().mean() * MICRO_BATCH) if budget else 0
    settings = UpdateSettings()
    packing = Packing(padding_free, tokens, MICRO_BATCH)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    half = len(exp) // 2
    minis = [list(range(half)), list(range(half, len(exp)))]
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    times, walls = [], []
    clock = time.perf_counter if device == "cuda" else time.process_time
    for step in range(steps + 1):
        if device == "cuda":
            torch.cuda.synchronize()
        t0, w0 = clock(), time.perf_counter()
        if cache is not None:
            cache.start(exp.batch)
        forward = PolicyForward(model, dummy, cache, banned, packing=packing)
        exp.old_logp, _ = experience_logprobs(forward, exp)
        exp.ref_logp, _ = experience_logprobs(forward.of(ref, None), exp)
        policy_update(forward, optimizer, None, exp, minis, settings)
        if cache is not None:
            cache.stop()
        if device == "cuda":
            torch.cuda.synchronize()
        if step:  # the first step warms up
            times.append(clock() - t0)
            walls.append(time.perf_counter() - w0)
    if device == "cuda":
        peak = torch.cuda.max_memory_allocated() / 2**20
    else:  # ru_maxrss is in KiB on Linux
        peak = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
    # the fastest timed step: the least disturbed by anything else the machine runs
    out = {"variant": name, "step_s": min(times), "wall_s": min(walls), "peak_mib": peak, "device": device}
    if name == "all off":
        out["vision_share"] = vision_share(model, exp)
        out["padding_fraction"] = padding_fraction(exp)
        out["sequences"] = len(exp)
        out["prompt_tokens"] = sorted(int(x) for x in exp.batch.inputs["attention_mask"].sum(1))
    return out


def realistic_profile(work: Path, steps: int, smoke: bool = False) -> dict:
    """Every variant in its own process on the same assets; prints the table and the ratios."""
    frames = SMOKE_FRAMES if smoke else FRAMES
    model_dir, records = make_assets(work, frames, n_text=1 if smoke else 3)
    rows = {}
    for name in VARIANTS:
        if smoke:  # one process for all: a start-up each costs more than the smoke run (peaks then mix)
            rows[name] = run_variant(name, model_dir, records, steps)
            continue
        r = subprocess.run(
            [sys.executable, __file__, "--variant", name, model_dir, records, str(steps)],
            capture_output=True,
            text=True,
        )
        if r.returncode:
            raise RuntimeError(f"variant {name!r} failed:\n{r.stderr[-3000:]}")
        rows[name] = json.loads(r.stdout.strip().splitlines()[-1])
    off = rows["all off"]
    lengths = off["prompt_tokens"]
    print(
        f"realistic profile: {len(lengths)} prompts ({len(frames)} videos of {frames[0]}-{frames[-1]} frames, "
        f"{len(lengths) - len(frames)} text-only), prompt tokens {lengths[0]}..{lengths[-1]} "
        f"({lengths[-1] / lengths[0]:.1f}x), {off['sequences']} sequences; vision tower "
        f"{off['vision_share']:.0%} of the longest video prompt's forward; padding "
        f"{off['padding_fraction']:.0%} of the padded micro-batches' tokens"
    )
    clock = "GPU wall" if off["device"] == "cuda" else "1-thread CPU"
    print(f"{'variant':<16}{'step (s)':>10}{'speed-up':>10}{'wall (s)':>10}{'peak MiB':>10}   ({clock} time)")
    for name, row in rows.items():
        ratio = off["step_s"] / row["step_s"]
        print(f"{name:<16}{row['step_s']:>10.2f}{ratio:>9.2f}x{row['wall_s']:>10.2f}{row['peak_mib']:>10.0f}")
    on = rows["all on"]
    result = {  # REALISTIC_KEYS
        "realistic_all_on_vs_off": round(off["step_s"] / on["step_s"], 2),
        "realistic_packed_vs_padded": round(off["step_s"] / rows["packed"]["step_s"], 2),
        "realistic_token_budget_vs_fixed": round(off["step_s"] / rows["token budget"]["step_s"], 2),
        "realistic_reused_vs_reencoded_vision": round(off["step_s"] / rows["reused vision"]["step_s"], 2),
        "realistic_peak_mib_all_on": round(on["peak_mib"]),
        "realistic_peak_mib_all_off": round(off["peak_mib"]),
        "realistic_vision_share": round(off["vision_share"], 2),
        "realistic_padding_fraction": round(off["padding_fraction"], 2),
    }
    return result


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--variant":
        print(json.dumps(run_variant(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))))
    else:
        raise SystemExit("run through benchmarks/train_step.py --profile realistic")
