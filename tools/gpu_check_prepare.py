"""The GPU check kit's preparation phase: a random-weight Qwen3-VL, synthetic videos and their cache.

Run by ``tools/gpu_check.py`` as its own process (``python tools/gpu_check_prepare.py RUN.yaml
SETTINGS.json``). Nothing is downloaded: the tokenizer and processor are the project's offline tiny
ones (``easyvideor1.models.tiny``), the weights are random, the videos come from the project's
synthesiser and the cache from its ``preprocess`` job.

The ``2b`` model has the real Qwen3-VL-2B-Instruct architecture (values written below from its
published ``config.json``: text hidden 2048, 28 layers, 16 query / 8 key-value heads of 128,
MLP 6144, vocabulary 151,936 with tied embeddings, interleaved M-RoPE [24, 20, 20] with theta 5e6;
vision 24 blocks of hidden 1024, MLP 4096, 16 heads, patch 16, DeepStack taps [5, 11, 17]), so
memory and time are those of the real model. Only the token ids of the vision markers come from
the tiny tokenizer; ids it does not know decode to nothing, which is all a timing run needs.
"""

from __future__ import annotations

import json
import os
import sys
import time

# Qwen3-VL-2B-Instruct (config.json of the published checkpoint; transformers' own Qwen3VLConfig
# defaults describe a larger model, so every value that matters is spelled out here)
QWEN3VL_2B_TEXT = {
    "vocab_size": 151936,
    "hidden_size": 2048,
    "intermediate_size": 6144,
    "num_hidden_layers": 28,
    "num_attention_heads": 16,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "hidden_act": "silu",
    "max_position_embeddings": 262144,
    "rms_norm_eps": 1e-6,
    "attention_bias": False,
    "tie_word_embeddings": True,
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 5000000.0,
        "mrope_section": [24, 20, 20],
        "mrope_interleaved": True,
    },
}
QWEN3VL_2B_VISION = {
    "depth": 24,
    "hidden_size": 1024,
    "intermediate_size": 4096,
    "num_heads": 16,
    "hidden_act": "gelu_pytorch_tanh",
    "in_channels": 3,
    "patch_size": 16,
    "spatial_merge_size": 2,
    "temporal_patch_size": 2,
    "out_hidden_size": 2048,
    "num_position_embeddings": 2304,
    "deepstack_visual_indexes": [5, 11, 17],
}


def model_config(size: str, tokenizer):
    """The model config: ``2b`` (Qwen3-VL-2B's architecture) or ``tiny`` (the tests' sub-1M model)."""
    from transformers import Qwen3VLConfig

    from easyvideor1.models.families import QWEN_SPECIAL_TOKENS
    from easyvideor1.models.tiny import tiny_config

    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in QWEN_SPECIAL_TOKENS}
    if size == "tiny":
        return tiny_config("qwen3vl", len(tokenizer), ids, hidden=64, layers=2)
    if size != "2b":
        raise ValueError(f"model size must be 2b or tiny, got {size!r}")
    text = {
        **QWEN3VL_2B_TEXT,
        "bos_token_id": ids["<|endoftext|>"],
        "eos_token_id": ids["<|im_end|>"],
        "pad_token_id": ids["<|endoftext|>"],
    }
    return Qwen3VLConfig(
        text_config=text,
        vision_config=QWEN3VL_2B_VISION,
        image_token_id=ids["<|image_pad|>"],
        video_token_id=ids["<|video_pad|>"],
        vision_start_token_id=ids["<|vision_start|>"],
        vision_end_token_id=ids["<|vision_end|>"],
        tie_word_embeddings=True,
    )


def build_model(out_dir: str, size: str, device: str, seed: int = 0) -> dict:
    """Write a random-weight bf16 Qwen3-VL with the offline processor to ``out_dir``."""
    import torch
    from transformers import AutoModelForImageTextToText, GenerationConfig

    from easyvideor1.models.tiny import build_processor

    processor = build_processor("qwen3vl")
    tok = processor.tokenizer
    config = model_config(size, tok)
    torch.manual_seed(seed)
    built_on = device
    try:
        with torch.device(device):  # initialising 2B parameters is seconds on a GPU, a minute on a CPU
            model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    except Exception as e:  # the check is about training, not about initialising: fall back, say so
        if device == "cpu":
            raise
        print(f"initialising on {device} failed ({type(e).__name__}: {e}); initialising on the CPU")
        built_on = "cpu"
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    model = model.to("cpu")  # saved from host memory; the GPU is free for the phases that measure
    model.generation_config = GenerationConfig(
        eos_token_id=[tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")],
        pad_token_id=tok.convert_tokens_to_ids("<|endoftext|>"),
        do_sample=True,
        temperature=1.0,
        top_k=0,
        top_p=1.0,
    )
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    processor.save_pretrained(out_dir)
    return {
        "size": size,
        "initialised_on": built_on,
        "parameters": sum(p.numel() for p in model.parameters()),
        "text": {k: v for k, v in config.text_config.to_dict().items() if k in QWEN3VL_2B_TEXT},
        "vision": {k: v for k, v in config.vision_config.to_dict().items() if k in QWEN3VL_2B_VISION},
    }


def write_train_file(records_path: str, out_path: str, per_video: int) -> int:
    """The training records: the first ``per_video`` records of every video (so every video is
    used), each with a gold ``offline_output`` so hybrid groups give non-zero advantages even though
    a random model never answers right (the update then moves real gradients)."""
    by_video: dict[str, list[dict]] = {}
    with open(records_path, encoding="utf-8") as f:
        for line in f:
            rec = json.loads(line)
            by_video.setdefault(rec["videos"][0], []).append(rec)
    rows = []
    for recs in by_video.values():
        for rec in recs[:per_video]:
            rows.append({**rec, "offline_output": f"<answer>{rec['answer']}</answer>"})
    with open(out_path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    return len(rows)


def prepare(run_yaml: str, settings: dict) -> dict:
    from easyvideor1.config import RunConfig, load_config
    from easyvideor1.data.preprocess import format_report, preprocess
    from easyvideor1.data.synthetic import write_synthetic_set

    cfg = load_config(RunConfig, run_yaml, [])
    out: dict = {}
    t = time.perf_counter()
    out["model"] = build_model(cfg.model.path, settings["model_size"], settings["device"])
    out["model"]["seconds"] = round(time.perf_counter() - t, 2)
    print(f"model: {out['model']['parameters'] / 1e6:.1f} M parameters in {out['model']['seconds']} s")

    t = time.perf_counter()
    width, height = settings["video_size"]
    records = write_synthetic_set(
        settings["synth_dir"],
        settings["videos"],
        seed=0,
        size=(width, height),
        fps=settings["video_fps"],
        duration=settings["video_frames"] / settings["video_fps"],
    )
    n_train = write_train_file(records, cfg.data.train_files[0], settings["records_per_video"])
    out["synth"] = {
        "videos": settings["videos"],
        "frames": settings["video_frames"],
        "size": [width, height],
        "train_records": n_train,
        "seconds": round(time.perf_counter() - t, 2),
    }
    print(f"synth: {settings['videos']} videos, {n_train} training records in {out['synth']['seconds']} s")

    report = preprocess(
        cfg.data.train_files, cfg.data, cfg.data.cache_dir, workers=settings["workers"], progress=False
    )
    print(format_report(report))
    if report.get("failed"):
        raise RuntimeError(f"preprocess failed for {report['failed']} video(s); see {cfg.data.cache_dir}")
    out["cache"] = {k: report.get(k) for k in ("videos", "built", "reused", "failed", "bytes", "seconds")}
    return out


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print("usage: gpu_check_prepare.py RUN.yaml SETTINGS.json RESULT.json", file=sys.stderr)
        return 2
    run_yaml, settings_path, result_path = argv
    with open(settings_path, encoding="utf-8") as f:
        settings = json.load(f)
    result = prepare(run_yaml, settings)
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
