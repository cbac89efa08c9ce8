"""One process that runs every vLLM-vs-HF check and writes the measurements as JSON.

Run by ``test_vllm_engine.py`` with ``sys.executable``: importing vLLM changes process state
(OpenMP thread binding, environment, signal handlers), and the import plus engine start cost
~20 s, so a single subprocess does all checks and the tests assert on its report.
Usage: python vllm_worker.py MODEL_DIR DATA_FILE OUT_JSON [--multiprocess]
       torchrun --nproc_per_node 2 vllm_worker.py MODEL_DIR DATA_FILE OUT_JSON --torchrun
"""

from __future__ import annotations

import json
import os
import sys
import time


def _cpu_env() -> None:
    cpus = sorted(os.sched_getaffinity(0))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", f"{cpus[0]}-{cpus[-1]}")


def _max_diff(a, b, mask) -> float:
    m = mask.bool()
    return float((a[m] - b[m]).abs().max()) if m.any() else 0.0


def main(model_dir: str, data_file: str, out_path: str, multiprocess: bool) -> None:
    _cpu_env()
    import torch
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.dataset import RecordDataset, encode_prompts
    from easyvideor1.data.records import load_records
    from easyvideor1.models.inputs import expand
    from easyvideor1.models.logprobs import response_logprobs
    from easyvideor1.models.vision import DummyVisionPass, vision_tower
    from easyvideor1.rollout.base import SamplingConfig
    from easyvideor1.rollout.hf import HFRolloutEngine
    from easyvideor1.rollout.vllm import VLLMRolloutEngine, vllm_prompt

    report: dict = {}
    cfg = DataConfig(
        model_family="qwen3vl", video_nframes=4, video_fps=None, video_min_pixels=1024, video_max_pixels=4096
    )
    ds = RecordDataset(load_records(data_file), cfg, data_file)
    samples = [ds[i] for i in range(len(ds))]
    report["kinds"] = [r.extra.get("kind", "") for r in ds.records]
    model = AutoModelForImageTextToText.from_pretrained(model_dir, dtype=torch.float32).eval()
    processor = AutoProcessor.from_pretrained(model_dir)
    tok = processor.tokenizer
    batch = encode_prompts(processor, samples, cfg, ds.loader)
    dummy = DummyVisionPass(model)

    torch.manual_seed(1234)
    rng_before = torch.get_rng_state()
    t = time.perf_counter()
    engine = VLLMRolloutEngine(
        model_dir,
        processor,
        dtype="float32",
        seed=0,
        max_model_len=2048,
        enforce_eager=True,
        in_process=not multiprocess,
        limit_mm_per_prompt={"video": 2, "image": 2},
    )
    report["start_seconds"] = time.perf_counter() - t
    report["global_rng_kept"] = torch.equal(torch.get_rng_state(), rng_before)
    B = len(batch)

    def parity(out, repeats, temperature) -> float:
        with torch.no_grad():
            hf, _ = response_logprobs(
                model, expand(batch, repeats), out.ids, out.mask, engine.banned, temperature, dummy
            )
        return _max_diff(out.logprobs, hf, out.mask)

    sample_cfg = SamplingConfig(temperature=1.0, max_new_tokens=16, return_logprobs=True)
    repeats = [3 if i % 2 == 0 else 2 for i in range(B)]
    if multiprocess:  # the update path over process boundaries: before / after a push
        out = engine.generate(batch, repeats, sample_cfg)
        report["parity_before"] = parity(out, repeats, 1.0)
        _perturb(model, 1)
        report["stale"] = parity(engine.generate(batch, repeats, sample_cfg), repeats, 1.0)
        t = time.perf_counter()
        engine.update_weights(model.state_dict().items())
        report["update_seconds"] = time.perf_counter() - t
        report["parity_after"] = parity(engine.generate(batch, repeats, sample_cfg), repeats, 1.0)
        engine.close()
        _write(out_path, report)
        return

    # (a) prompt token ids: vLLM's own processor vs the HF processor's (left padding removed)
    outs = engine.llm.generate(
        [vllm_prompt(t, m) for t, m in zip(batch.texts, batch.media, strict=True)],
        engine.sampling_params(SamplingConfig(temperature=0, max_new_tokens=1)),
        use_tqdm=False,
    )
    ids, attn = batch.inputs["input_ids"], batch.inputs["attention_mask"]
    report["prompt_ids"] = [
        {
            "hf": ids[i][attn[i].bool()].tolist(),
            "vllm": list(o.prompt_token_ids),
        }
        for i, o in enumerate(outs)
    ]
    report["tokens"] = {t: tok.convert_tokens_to_ids(t) for t in ("<|vision_start|>", "<|vision_end|>")}
    report["tokens"].update({"video_pad": tok.convert_tokens_to_ids("<|video_pad|>")})
    report["tokens"].update({"image_pad": tok.convert_tokens_to_ids("<|image_pad|>")})
    report["prompt_text"] = [tok.convert_ids_to_tokens(p["vllm"]) for p in report["prompt_ids"]]

    # (d) greedy: HF and vLLM engines token for token (zero and repeated greedy requests included)
    hf_engine = HFRolloutEngine(model, processor)
    greedy_cfg = SamplingConfig(temperature=0, max_new_tokens=24)
    g_repeats = [2 if i == 0 else (0 if i == 1 else 1) for i in range(B)]
    hf_g = hf_engine.generate(batch, g_repeats, greedy_cfg)
    v_g = engine.generate(batch, g_repeats, greedy_cfg)
    report["greedy"] = {
        "hf_ids": hf_g.ids.tolist(),
        "vllm_ids": v_g.ids.tolist(),
        "hf_mask": hf_g.mask.tolist(),
        "vllm_mask": v_g.mask.tolist(),
        "hf_truncated": hf_g.truncated,
        "vllm_truncated": v_g.truncated,
        "hf_texts": hf_g.texts,
        "vllm_texts": v_g.texts,
    }
    # greedy with the official evaluation's presence penalty: both engines penalise the same way
    pen_cfg = SamplingConfig(temperature=0, max_new_tokens=24, presence_penalty=1.5)
    hf_p = hf_engine.generate(batch, [1] * B, pen_cfg)
    v_p = engine.generate(batch, [1] * B, pen_cfg)
    report["presence_penalty"] = {
        "hf_ids": hf_p.ids.tolist(),
        "vllm_ids": v_p.ids.tolist(),
        "changed_outputs": hf_p.ids.tolist() != hf_engine.generate(batch, [1] * B, greedy_cfg).ids.tolist(),
    }

    # (b) sampled tokens' log-probs: vLLM's vs the training forward's
    out = engine.generate(batch, repeats, sample_cfg)
    report["parity_t1"] = parity(out, repeats, 1.0)
    report["sampled_rows"] = out.ids.shape[0]
    out07 = engine.generate(
        batch, repeats, SamplingConfig(temperature=0.7, max_new_tokens=16, return_logprobs=True)
    )
    report["parity_t07"] = parity(out07, repeats, 0.7)
    engine._rng.seed(123)
    a = engine.generate(batch, repeats, sample_cfg)
    engine._rng.seed(123)
    b = engine.generate(batch, repeats, sample_cfg)
    report["seeded_reproducible"] = torch.equal(a.ids, b.ids)

    # (e) vision tokens never sampled, and how many an unbanned sampler would have drawn
    big_repeats = [8] * B
    big = engine.generate(batch, big_repeats, SamplingConfig(temperature=1.0, max_new_tokens=32))
    m = big.mask.bool()
    report["banned_sampled"] = int(torch.isin(big.ids[m], torch.tensor(engine.banned)).sum())
    report["banned_expected_unbanned"] = float(
        banned_mass(model, batch, big_repeats, big, engine.banned).sum()
    )
    report["eos"] = _eos_report(big, engine, 32)

    # (f) multi-turn episodes with video tools: vLLM vs HF, token for token, and log-probs
    report["episodes"] = episode_checks(model, processor, engine, hf_engine, dummy, os.path.dirname(out_path))

    # (c) a weight update: stale engine vs perturbed HF model, then after the push (both transports)
    _perturb(model, 1)
    report["stale"] = parity(engine.generate(batch, repeats, sample_cfg), repeats, 1.0)
    t = time.perf_counter()
    engine.update_weights(model.state_dict().items())
    report["update_seconds"] = time.perf_counter() - t
    report["parity_after_update"] = parity(engine.generate(batch, repeats, sample_cfg), repeats, 1.0)
    hf_g2 = hf_engine.generate(batch, [1] * B, greedy_cfg)
    v_g2 = engine.generate(batch, [1] * B, greedy_cfg)
    report["greedy_after_update_equal"] = torch.equal(hf_g2.ids, v_g2.ids) and torch.equal(
        hf_g2.mask, v_g2.mask
    )
    _perturb(model, 2)
    engine.weight_transport = "bytes"
    t = time.perf_counter()
    engine.update_weights(model.state_dict().items())
    report["update_bytes_seconds"] = time.perf_counter() - t
    report["parity_after_bytes_update"] = parity(engine.generate(batch, repeats, sample_cfg), repeats, 1.0)

    # (g) training steps (new videos, then a push) leave vLLM's caches as they found them
    seconds, t = {}, time.perf_counter()
    report["cache_rounds"] = cache_rounds(engine, model, batch, CACHE_ROUNDS)
    seconds["cache_rounds"], t = time.perf_counter() - t, time.perf_counter()

    # (h) a push that changes only the vision tower reaches videos the engine has encoded (and
    # preprocessed) with the old one: the stale generation puts them in its caches
    _perturb(model, 3, vision_tower(model))
    once = [1] * B
    stale = parity(engine.generate(batch, once, sample_cfg), once, 1.0)
    engine.update_weights(model.state_dict().items())
    after = parity(engine.generate(batch, once, sample_cfg), once, 1.0)
    report["tower_push"] = {"stale": stale, "after": after}
    seconds["tower_push"], t = time.perf_counter() - t, time.perf_counter()

    # (i) a policy pushed towards the vision placeholders (last: it leaves the model useless)
    push_towards_tokens(model, engine.banned)
    engine.update_weights(model.state_dict().items())
    report["pushed_to_vision"] = vision_push_report(model, engine, batch, [2] * B)
    seconds["pushed_to_vision"] = time.perf_counter() - t
    report["guard_seconds"] = seconds
    engine.sleep()
    engine.wake_up()
    engine.close()
    _write(out_path, report)


# a scripted opening turn: a seek (a clip) and a zoom (an image) in one turn, the tool results
# carrying both media kinds; every turn after it is the engine's own
OPENING = (
    '<tool_call>\n{"name": "seek", "arguments": {"start_s": 1, "end_s": 3}}\n</tool_call>\n'
    '<tool_call>\n{"name": "zoom", "arguments": {"time_s": 2, "box": [0, 0, 500, 500]}}\n</tool_call>'
)


def episode_checks(model, processor, engine, hf_engine, dummy, workdir: str) -> dict:
    """Episodes on the batch path (the trainer's: every episode's next turn in one ``generate``)
    with the opening turn scripted: greedy vLLM vs HF ids, masks and calls; sampled vLLM log-probs
    of the turns after the tool results vs one training forward over the whole episode."""
    import torch

    from easyvideor1.data.config import DataConfig
    from easyvideor1.data.dataset import RecordDataset, encode_prompts
    from easyvideor1.data.records import load_records
    from easyvideor1.data.synthetic import write_tool_demo_set
    from easyvideor1.models.logprobs import response_logprobs
    from easyvideor1.rollout.base import SamplingConfig
    from easyvideor1.rollout.episode import GivenTurns, run_batch_episodes
    from easyvideor1.tools import ToolsConfig
    from easyvideor1.tools.session import ToolSession

    train, _ = write_tool_demo_set(os.path.join(workdir, "tool_set"), n_train=3, n_val=1)
    cfg = DataConfig(
        model_family="qwen3vl", video_nframes=4, video_fps=None, video_min_pixels=1024, video_max_pixels=1024
    )
    ds = RecordDataset(load_records(train), cfg, train)
    session = ToolSession(ToolsConfig(names=["seek", "zoom"], seek_max_pixels=4096), "qwen3_vl")
    ds.tools = session.schemas()
    samples = [ds[i] for i in range(len(ds))]
    batch = encode_prompts(processor, samples, cfg, ds.loader)
    make_tools = [lambda s=s: session.episode(s.record, list(s.videos)) for s in samples]
    repeats = [2, 1, 1]

    def run(eng, sampling):
        opened = GivenTurns(eng, processor.tokenizer, [OPENING], "opening", then_engine=True)
        return run_batch_episodes(opened, processor, batch, repeats, sampling, "qwen3_vl", make_tools)

    # a turn's limit holds the opening (two calls, ~70 tokens of the tiny tokenizer)
    greedy = SamplingConfig(temperature=0, max_new_tokens=96)
    hf, vl = run(hf_engine, greedy), run(engine, greedy)
    out: dict = {
        "hf_ids": [e.ids for e in hf.episodes],
        "vllm_ids": [e.ids for e in vl.episodes],
        "hf_policy_mask": [e.policy_mask for e in hf.episodes],
        "vllm_policy_mask": [e.policy_mask for e in vl.episodes],
        "hf_turns": [e.turns for e in hf.episodes],
        "vllm_turns": [e.turns for e in vl.episodes],
        "media": [[e.video_count, e.image_count] for e in vl.episodes],
        "vllm_media": [[len(e.media["video"]), len(e.media["image"])] for e in vl.episodes],
    }
    sampled = run(engine, SamplingConfig(temperature=1.0, max_new_tokens=96, return_logprobs=True))
    gaps, after = [], 0
    for ep in sampled.episodes:
        P = ep.prompt_len
        seq = {
            k: v[:, :P] if k in ("input_ids", "attention_mask", "mm_token_type_ids") else v
            for k, v in ep.inputs.items()
            if v is not None
        }
        ids = torch.tensor([ep.ids])
        types = ep.response_types()
        with torch.no_grad():
            logp, _ = response_logprobs(
                model,
                seq,
                ids,
                torch.ones_like(ids),
                engine.banned,
                1.0,
                dummy,
                response_types=None if types is None else types[None],
            )
        if 0 not in ep.policy_mask:
            continue  # no tool turn (counted by tokens_after_tools)
        first_tool = ep.policy_mask.index(0)
        for t in range(first_tool, len(ep.ids)):  # the policy's tokens after a tool result
            if ep.policy_mask[t]:
                gaps.append(abs(float(logp[0, t]) - ep.logprobs[t]))
                after += 1
    out["logprob_gap_after_tools"] = max(gaps) if gaps else None
    out["tokens_after_tools"] = after
    out["sampled_policy_tokens"] = int(sampled.mask.sum())
    return out


def torchrun_check(model_dir: str, out_path: str) -> None:
    """One in-process engine per torchrun rank, as the trainer runs them: generation, a weight push,
    and the trainer's process group still usable after ``close()``."""
    _cpu_env()
    import torch
    import torch.distributed as dist
    from transformers import AutoModelForImageTextToText, AutoProcessor

    from easyvideor1.models.inputs import PromptBatch
    from easyvideor1.rollout.base import SamplingConfig
    from easyvideor1.rollout.vllm import VLLMRolloutEngine

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    processor = AutoProcessor.from_pretrained(model_dir)
    engine = VLLMRolloutEngine(
        model_dir, processor, dtype="float32", seed=rank, max_model_len=1024, enforce_eager=True
    )
    messages = [{"role": "user", "content": [{"type": "text", "text": "What is two plus three?"}]}]
    text = processor.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    batch = PromptBatch({}, [0], [0], texts=[text], media=[{"video": [], "image": []}])
    rows = engine.generate(batch, [2], SamplingConfig(max_new_tokens=8)).ids.shape[0]
    engine.update_weights(AutoModelForImageTextToText.from_pretrained(model_dir).state_dict().items())
    engine.close()
    total = torch.tensor([float(rank + 1)])
    dist.all_reduce(total)  # the trainer's group survived vLLM's shutdown
    dist.barrier()
    dist.destroy_process_group()
    _write(f"{out_path}.rank{rank}", {"rows": rows, "sum": float(total)})


def _perturb(model, seed: int, module=None) -> None:
    """Change every weight of ``module`` (default: the whole model) noticeably (a stand-in for an
    optimizer step)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in (module or model).parameters():
            p.add_(torch.randn(p.shape, generator=g) * 0.05)


def banned_mass(model, batch, repeats: list[int], out, banned: list[int]):
    """Each sampled token's probability of a banned id under ``model``'s unbanned distribution
    (the chance an engine without the ban would have drawn one there), for the unmasked tokens."""
    import torch

    from easyvideor1.models.inputs import append_responses, expand

    with torch.no_grad():
        logits = model(**append_responses(expand(batch, repeats), out.ids, out.mask)).logits
    P = batch.inputs["input_ids"].shape[1]
    probs = logits[:, P - 1 : P - 1 + out.ids.shape[1]].float().softmax(-1)[..., banned].sum(-1)
    return probs[out.mask.bool()]


def push_towards_tokens(model, ids: list[int], scale: float = 1000.0) -> None:
    """Make ``ids`` dominate every next-token distribution: their output-embedding rows become
    ``+-scale`` along one hidden axis per pair, so one of each pair gets a logit of ``scale`` times
    the final hidden state's (order-one) value on that axis, far above any other token's."""
    import torch

    with torch.no_grad():
        rows = model.get_output_embeddings().weight
        for k, i in enumerate(ids):
            rows[i] = 0
            rows[i, k // 2] = scale if k % 2 == 0 else -scale


def vision_push_report(model, engine, batch, repeats: list[int]) -> dict:
    """Sampled and greedy responses of ``engine`` after :func:`push_towards_tokens`: how many of
    their tokens are banned (vision placeholders), and the least probability the pushed ``model``
    gave the banned ids at any of those tokens (the push's strength)."""
    import torch

    from easyvideor1.rollout.base import SamplingConfig

    banned, sampled, least, tokens = torch.tensor(engine.banned), 0, 1.0, 0
    for temperature, rows in ((1.0, repeats), (0.0, [1] * len(repeats))):
        out = engine.generate(batch, rows, SamplingConfig(temperature=temperature, max_new_tokens=12))
        m = out.mask.bool()
        sampled += int(torch.isin(out.ids[m], banned).sum())
        least = min(least, float(banned_mass(model, batch, rows, out, engine.banned).min()))
        tokens += int(m.sum())
    return {"banned_sampled": sampled, "least_banned_mass": least, "tokens": tokens}


CACHE_ROUNDS = 20


def cache_rounds(engine, model, batch, rounds: int) -> list[dict]:
    """``rounds`` training steps as the engine sees them: rollouts on media of their own (each
    round's frames and images differ from the other rounds' in one pixel), then a weight push
    (the same weights: what the caches do after a push does not depend on them). vLLM's caches
    and the process's resident memory after each generation and after each push."""
    from easyvideor1.rollout.base import SamplingConfig

    out = []
    for r in range(rounds):
        engine.generate(_fresh_media(batch, r), [1] * len(batch), SamplingConfig(max_new_tokens=4))
        generated = _cache_sizes(engine)
        engine.update_weights(model.state_dict().items())
        out.append({"generated": generated, "pushed": _cache_sizes(engine)})
    return out


def _fresh_media(batch, r: int):
    """``batch`` with round ``r``'s media: one pixel of every frame and image set to ``r`` (a
    video that several prompts share stays one video)."""
    import dataclasses

    def video(item):
        frames, meta = item
        frames = frames.copy()
        frames[:, 0, 0] = r
        return frames, meta

    def image(img):
        img = img.copy()
        img.putpixel((0, 0), (r, r, r))
        return img

    media = [
        {"video": [video(v) for v in m["video"]], "image": [image(i) for i in m["image"]]}
        for m in batch.media
    ]
    return dataclasses.replace(batch, media=media)


def _cache_sizes(engine) -> dict:
    """An in-process engine's multimodal caches: the model runner's encoder outputs (entries,
    MiB), the scheduler's encoder-cache bookkeeping, the processor cache on both sides (the
    renderer's keys, the engine core's preprocessed items and their MiB); and resident memory."""
    import os

    llm_engine = engine.llm.llm_engine
    core = llm_engine.engine_core.engine_core
    runner = core.model_executor.driver_worker.worker.model_runner
    encoder = runner.encoder_cache
    items = core.mm_receiver_cache._cache
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return {
        "encoder_entries": len(encoder),
        "encoder_mib": sum(t.numel() * t.element_size() for t in encoder.values()) / 2**20,
        "scheduler_entries": len(core.scheduler.encoder_cache_manager.cached),
        "processor_keys": len(llm_engine.renderer.mm_processor_cache._cache),
        "processor_entries": len(items),
        "processor_mib": items.currsize / 2**20,
        "resident_mib": resident / 2**20,
    }


def _eos_report(out, engine, max_new_tokens: int) -> dict:
    """The HF engine's cut-at-EOS contract, checked row by row."""
    rows_ok, with_eos, truncated = True, 0, 0
    for row, mask, trunc, text in zip(
        out.ids.tolist(), out.mask.tolist(), out.truncated, out.texts, strict=True
    ):
        k = sum(mask)
        kept = row[:k]
        eos_at = [j for j, t in enumerate(kept) if t in engine.eos_ids]
        ok = mask == [1] * k + [0] * (len(row) - k) and all(t == engine.pad_id for t in row[k:])
        if trunc:
            ok &= not eos_at and k == max_new_tokens
            truncated += 1
        else:
            ok &= eos_at == [k - 1]
            with_eos += 1
        import torch

        ok &= text == engine.decode(torch.tensor(kept))
        rows_ok &= ok
    return {"rows_ok": rows_ok, "with_eos": with_eos, "truncated": truncated}


def _write(path: str, report: dict) -> None:
    with open(path, "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    if "--torchrun" in sys.argv[4:]:
        torchrun_check(sys.argv[1], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2], sys.argv[3], "--multiprocess" in sys.argv[4:])
