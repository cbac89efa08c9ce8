"""vLLM-CPU vs transformers on a tiny model of a family other than Qwen3-VL (whose fuller check is
``vllm_worker.py``), in the given dtype: prompt ids, sampled log-probs against the training
forward, greedy rows, and a weight push. Writes a JSON report for test_vllm_families.py.

    python vllm_family_worker.py MODEL DATA OUT DTYPE [MODEL DATA OUT DTYPE ...]

Several models are checked in turn in this one process (vLLM and torch imported once), each engine
closed before the next starts; a model whose check fails gets ``{"error": traceback}`` as its
report and the next one is checked.
"""

from __future__ import annotations

import json
import sys
import time

from vllm_worker import _cpu_env, _max_diff, _perturb  # same directory (run as a script)


def main(model_dir: str, data_file: str, out_path: str, dtype: str) -> None:
    _cpu_env()
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.dataset import RecordDataset, encode_prompts
    from easyvideor1.data.records import load_records
    from easyvideor1.models.families import family_of_model, get_family
    from easyvideor1.models.inputs import expand
    from easyvideor1.models.logprobs import response_logprobs
    from easyvideor1.models.vision import DummyVisionPass
    from easyvideor1.resolve import resolve_data
    from easyvideor1.rollout.base import SamplingConfig
    from easyvideor1.rollout.hf import HFRolloutEngine
    from easyvideor1.rollout.vllm import VLLMRolloutEngine, vllm_prompt

    report: dict = {}
    cfg = DataConfig(video_nframes=4, video_fps=None, video_min_pixels=1024, video_max_pixels=4096)
    cfg = resolve_data(cfg, model_dir)
    ds = RecordDataset(load_records(data_file), cfg, data_file)
    samples = [ds[i] for i in range(len(ds))]
    # prompts with more videos than vLLM's implementation of the family takes: refused, not sent
    limit = get_family(cfg.model_family).engine.vllm_max_videos or 99
    too_many = [s for s in samples if len(s.videos) > limit]
    samples = [s for s in samples if len(s.videos) <= limit]
    report["kinds"] = [s.record.extra.get("kind", "") for s in samples]
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=getattr(torch, dtype)).eval()
    family_of_model(model).vision.prepare_model(model)
    processor = AutoProcessor.from_pretrained(model_dir)
    batch = encode_prompts(processor, samples, cfg, ds.loader)
    dummy = DummyVisionPass(model)
    if dtype != "float32":
        try:  # float32 is refused with the reason, before any engine starts
            VLLMRolloutEngine(model_dir, processor, dtype="float32")
            report["float32_refused"] = ""
        except ValueError as e:
            report["float32_refused"] = str(e)
    t = time.perf_counter()
    engine = VLLMRolloutEngine(
        model_dir,
        processor,
        dtype=dtype,
        seed=0,
        max_model_len=2048,
        enforce_eager=True,
        limit_mm_per_prompt={"video": 2, "image": 2},
    )
    report["start_seconds"] = time.perf_counter() - t
    report["mm_kwargs"] = engine.mm_kwargs
    report["refused"] = []
    for sample in too_many:
        try:
            engine.generate(encode_prompts(processor, [sample], cfg, ds.loader), [1], SamplingConfig())
            report["refused"].append("")
        except ValueError as e:
            report["refused"].append(str(e))
    B = len(batch)

    outs = engine.llm.generate(
        [vllm_prompt(t, m, engine.mm_kwargs) for t, m in zip(batch.texts, batch.media, strict=True)],
        engine.sampling_params(SamplingConfig(temperature=0, max_new_tokens=1)),
        use_tqdm=False,
    )
    ids, attn = batch.inputs["input_ids"], batch.inputs["attention_mask"]
    hf_ids = [ids[i][attn[i].bool()].tolist() for i in range(len(outs))]
    v_ids = [list(o.prompt_token_ids) for o in outs]
    report["prompt_ids_equal"] = [a == b for a, b in zip(hf_ids, v_ids, strict=True)]
    if cfg.model_family == "internvl":
        # vLLM fills a frame's placeholder run with <video> ids where transformers has <IMG_CONTEXT>
        tok = processor.tokenizer
        video, context = tok.convert_tokens_to_ids("<video>"), tok.convert_tokens_to_ids("<IMG_CONTEXT>")
        report["prompt_ids_equal_but_frame_placeholders"] = [
            a == [context if x == video else x for x in b] for a, b in zip(hf_ids, v_ids, strict=True)
        ]

    def parity(out, repeats) -> float:
        with torch.no_grad():
            hf, _ = response_logprobs(
                model, expand(batch, repeats), out.ids, out.mask, engine.banned, 1.0, dummy
            )
        return _max_diff(out.logprobs.float(), hf.float(), out.mask)

    sample_cfg = SamplingConfig(temperature=1.0, max_new_tokens=12, return_logprobs=True)
    repeats = [2] * B
    report["parity"] = parity(engine.generate(batch, repeats, sample_cfg), repeats)
    greedy = SamplingConfig(temperature=0, max_new_tokens=12)
    hf_engine = HFRolloutEngine(model, processor)
    hf_g, v_g = hf_engine.generate(batch, [1] * B, greedy), engine.generate(batch, [1] * B, greedy)
    report["greedy_rows_equal"] = [a == b for a, b in zip(hf_g.ids.tolist(), v_g.ids.tolist(), strict=True)]
    report["greedy_first_token_equal"] = [
        int(a[0]) == int(b[0]) for a, b in zip(hf_g.ids, v_g.ids, strict=True)
    ]

    _perturb(model, 1)
    report["stale"] = parity(engine.generate(batch, repeats, sample_cfg), repeats)
    try:
        engine.update_weights(model.state_dict().items())
        report["parity_after_update"] = parity(engine.generate(batch, repeats, sample_cfg), repeats)
    except RuntimeError as e:  # a family whose pushed weights vLLM does not take (measured)
        report["push_refused"] = str(e)
    engine.close()
    with open(out_path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    import traceback

    args = sys.argv[1:]
    for k in range(0, len(args), 4):
        try:
            main(*args[k : k + 4])
        except Exception:
            with open(args[k + 2], "w") as f:
                json.dump({"error": traceback.format_exc()}, f)
