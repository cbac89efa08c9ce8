"""Run by tests under ``torchrun`` (or plain ``python`` for the single-process reference).

Modes:
  modalities MODEL RECORDS OUT [--no-dummy]
      every (rank 0 kind, rank 1 kind) pair of video / image / text / mixed prompts: log-probs and one
      FSDP2 update each; writes the pairs that completed to OUT.
  update MODEL RECORDS OUT
      one update on the global batch [video, image, text, mixed] split unevenly over the ranks
      (rank 0: three prompts, rank 1: one, so filler micro-batches run); writes the loss and the
      full updated weights to OUT (safetensors) from rank 0.
  episodes MODEL RECORDS OUT
      as update, but each response to a prompt with a video is an episode: a seek call, its real
      result (frames in the tool turn, masked out of the loss), then the answer.
  cases PLAN [--sp K]
      each line of the JSON list PLAN, ``[MODE, MODEL, RECORDS, OUT, *FLAGS]``, in turn in this one
      launch (the imports and the process group paid once); a case's OUT is written when it is done,
      so a failure leaves the later cases' files missing. ``--sp`` is the launch's, not a case's.
  Flags: --no-dummy (no dummy vision passes), --bf16 (FSDP mixed precision, bfloat16 compute),
  --checkpointing (gradient checkpointing), --sp K (sequence parallelism over groups of K ranks;
  each data-parallel group takes its share of the batch), --packed (padding-free micro-batches),
  --shared (shared-prefix packing), --frames N (frames per video: a longer prompt).
"""

from __future__ import annotations

import itertools
import json
import sys

import torch
from safetensors.torch import save_file

from easyvideor1.data.config import DataConfig
from easyvideor1.data.dataset import RecordDataset, encode_prompts
from easyvideor1.models.loading import load_policy
from easyvideor1.models.logprobs import Packing, PolicyForward
from easyvideor1.models.vision import DummyVisionPass
from easyvideor1.resolve import resolve_data
from easyvideor1.rollout.base import banned_token_ids
from easyvideor1.trainer.distributed import (
    DistributedConfig,
    full_weights,
    init_distributed,
    shard_model,
    shutdown_distributed,
)
from easyvideor1.trainer.experience import Experience
from easyvideor1.trainer.update import UpdateSettings, experience_logprobs, policy_update

KINDS = ("video", "image", "text", "mixed")
RESPONSES = ("<answer>A</answer>", "<answer>B</answer>")


CALL = '<tool_call>\n{"name": "seek", "arguments": {"start_s": 0.0, "end_s": 0.5, "num_frames": 2}}\n</tool_call>'


def build_episodes(processor, dataset, kinds: list[str], session) -> Experience:
    """Two fixed responses per prompt, as replayed episodes (a seek, then the answer) where the
    prompt has a video; advantages +1 / -0.5."""
    from types import SimpleNamespace

    from easyvideor1.rollout.episode import prompt_row, replay_episode
    from easyvideor1.rollout.sampling import SamplingConfig
    from easyvideor1.trainer.experience import Response, stacked

    by_id = {r.problem_id: i for i, r in enumerate(dataset.records)}
    samples = [dataset[by_id[k]] for k in kinds]
    batch = encode_prompts(processor, samples, dataset.cfg, dataset.loader)
    tok = processor.tokenizer
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    engine = SimpleNamespace(eos_ids=[eos], pad_id=0)
    sampling = SamplingConfig(max_new_tokens=512)
    groups = []
    for p, s in enumerate(samples):
        group = []
        for text in RESPONSES:
            if s.videos:
                first = prompt_row(batch, p)
                ep = replay_episode(
                    engine,
                    processor,
                    first,
                    session.episode(s.record, s.videos),
                    [CALL, text],
                    sampling,
                    session.model_family,
                    "r",
                )
                assert ep.tool_turns == 1 and ep.tool_inputs, ep.turns
                group.append(
                    Response(
                        torch.tensor(ep.ids),
                        text,
                        False,
                        False,
                        policy=torch.tensor(ep.policy_mask),
                        media=ep.tool_inputs,
                        types=ep.response_types(),
                        episode=ep,
                    )
                )
            else:
                group.append(
                    Response(
                        torch.tensor(tok(text, add_special_tokens=False)["input_ids"] + [eos]),
                        text,
                        False,
                        False,
                    )
                )
        groups.append(group)
    exp = stacked(batch, groups, 0)
    signs = torch.tensor([1.0 if i % 2 == 0 else -0.5 for i in range(len(exp))])
    exp.tasks = ["multiple choice"] * len(exp)
    exp.advantages = signs[:, None] * exp.mask.float()
    return exp


def build_experience(processor, dataset, kinds: list[str]) -> Experience:
    """Two fixed responses per prompt with advantages +1 / -0.5 (old log-probs filled in later)."""
    by_id = {r.problem_id: i for i, r in enumerate(dataset.records)}
    samples = [dataset[by_id[k]] for k in kinds]
    batch = encode_prompts(processor, samples, dataset.cfg, dataset.loader)
    tok = processor.tokenizer
    from easyvideor1.models.families import get_family

    eos = tok.convert_tokens_to_ids(get_family(dataset.cfg.model_family).tokens.eos_tokens[0])
    rows, prompt_of = [], []
    for p in range(len(samples)):
        for text in RESPONSES:
            rows.append(tok(text, add_special_tokens=False)["input_ids"] + [eos])
            prompt_of.append(p)
    width = max(len(r) for r in rows)
    ids = torch.zeros(len(rows), width, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)], mask[i, : len(r)] = torch.tensor(r), 1
    signs = torch.tensor([1.0 if i % 2 == 0 else -0.5 for i in range(len(rows))])  # a non-zero loss
    n = len(rows)
    return Experience(
        batch=batch,
        prompt_of=prompt_of,
        ids=ids,
        mask=mask,
        texts=[RESPONSES[i % 2] for i in range(n)],
        offline=torch.zeros(n, dtype=torch.bool),
        truncated=torch.zeros(n, dtype=torch.bool),
        scores={},
        tasks=["multiple choice"] * n,
        advantages=signs[:, None] * mask.float(),
    )


def one_update(
    model, optimizer, processor, dataset, kinds, dummy, packing: Packing, session=None
) -> dict[str, float]:
    exp = (
        build_experience(processor, dataset, kinds)
        if session is None
        else build_episodes(processor, dataset, kinds, session)
    )
    banned = banned_token_ids(processor.tokenizer)
    forward = PolicyForward(model, dummy, banned=banned, packing=packing)
    exp.old_logp, _ = experience_logprobs(forward, exp)
    settings = UpdateSettings(max_grad_norm=1e9)
    return policy_update(forward, optimizer, None, exp, [list(range(len(exp)))], settings)


def _flag(flags: list[str], name: str, default: str) -> str:
    return flags[flags.index(name) + 1] if name in flags else default


def _launched() -> bool:
    import os

    return int(os.environ.get("WORLD_SIZE", "1")) > 1


def run_case(state, mode: str, model_dir: str, records: str, out: str, flags: list[str]) -> None:
    """One MODE run (the module docstring) on this launch's process group."""
    torch.manual_seed(0)
    model, processor = load_policy(model_dir, gradient_checkpointing="--checkpointing" in flags)
    model.train()
    if state.sp_size > 1:
        from easyvideor1.models.sequence_parallel import enable

        enable(model, state.sp)
    if state.enabled:
        shard_model(model, DistributedConfig(param_dtype="bfloat16" if "--bf16" in flags else None), state)
    dummy = None if "--no-dummy" in flags else DummyVisionPass(model)
    frames = int(_flag(flags, "--frames", "4"))
    data_cfg = resolve_data(
        DataConfig(video_fps=None, video_nframes=frames), model_dir
    )  # the model names the family
    dataset = RecordDataset.from_files([records], data_cfg)
    # SGD: the updated weights are linear in the gradient, so they compare at float precision
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    if mode == "modalities":
        done = []
        for a, b in itertools.product(KINDS, KINDS):
            mine = a if state.rank == 0 else b
            one_update(model, optimizer, processor, dataset, [mine], dummy, Packing(micro_batch_size=1))
            done.append([a, b])
            print(f"rank {state.rank}: pair {a}/{b} ok", flush=True)
        if state.is_main:
            with open(out, "w") as f:
                json.dump(done, f)
    elif mode in ("update", "episodes"):
        session = None
        if mode == "episodes":
            from easyvideor1.tools import ToolsConfig
            from easyvideor1.tools.session import ToolSession

            session = ToolSession(ToolsConfig(names=["seek"], seek_max_pixels=4096), data_cfg.model_family)
            dataset.tools = session.schemas()  # the prompts list the tool
        kinds = list(KINDS)
        if state.data_world > 1:
            kinds = kinds[:3] if state.data_rank == 0 else kinds[3:]
        shared = "on" if "--shared" in flags else "off"
        packing = Packing("--packed" in flags, micro_batch_size=2, shared_prefix=shared)
        metrics = one_update(model, optimizer, processor, dataset, kinds, dummy, packing, session)
        weights = {k: v.clone().contiguous() for k, v in full_weights(model)}
        if state.is_main:
            save_file(weights, out, metadata={"metrics": json.dumps(metrics)})
    else:
        raise SystemExit(f"unknown mode {mode}")


def main() -> int:
    flags = sys.argv[2:]
    sp = int(_flag(flags, "--sp", "1"))
    state = init_distributed(
        DistributedConfig(timeout_minutes=1.0, sequence_parallel_size=sp if _launched() else 1)
    )
    if sys.argv[1] == "cases":
        with open(sys.argv[2]) as f:
            cases = json.load(f)
    else:
        cases = [sys.argv[1:]]  # MODE MODEL RECORDS OUT FLAGS...
    for mode, model_dir, records, out, *case_flags in cases:
        run_case(state, mode, model_dir, records, out, case_flags)
        print(f"rank {state.rank}: case {mode} {model_dir} {' '.join(case_flags)} done", flush=True)
    shutdown_distributed()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
