"""Ulysses sequence parallelism (``distributed.sequence_parallel_size``): one update with the
sequence split over 2 ranks (and 2 x 2 with 4 ranks) equals the single-process update, for
Qwen2.5-VL, Qwen3-VL (DeepStack) and Qwen3.5 (gated DeltaNet, head-parallel) on 16-frame video
prompts, padded and packed; a training run under it (each prompt generated once across a pair);
the attention without an S x S mask; what cannot be split is refused with the key named."""

from __future__ import annotations

import json

import pytest

from easyvideor1.models.sequence_parallel import check
from easyvideor1.models.tiny import make_tiny_model
from easyvideor1.trainer.config import DistributedConfig
from easyvideor1.trainer.distributed import _sequence_parallel_groups
from tests.conftest import write_modality_records

from .test_distributed import HERE, Launches, _torchrun, assert_same_update

pytestmark = pytest.mark.slow
FRAMES = ("--frames", "16")


@pytest.fixture(scope="module")
def assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("sp")
    models = {f: make_tiny_model(str(d / f), f) for f in ("qwen2_5_vl", "qwen3_vl", "glm4v")}
    # DeltaNet heads to split: 2 key and 4 value heads (two value heads per key head, as released)
    heads = {
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 32,
    }
    models["qwen3_5"] = make_tiny_model(str(d / "qwen3_5"), "qwen3_5", text_fields=heads)
    (d / "rec").mkdir()
    records = write_modality_records(d / "rec", 16, 0, ("A. red", "B. blue"))
    return {"records": records, "models": models, "dir": d}


def _name(family: str, flags: tuple[str, ...]) -> str:
    return f"{family}{''.join(flags)}.safetensors"


@pytest.fixture(scope="module")
def launches(assets) -> Launches:
    """Every update the tests below compare, on 1 process, 2 ranks (a sequence-parallel pair) and 4
    ranks (two pairs): one launch for each number of ranks."""
    families = ("qwen2_5_vl", "qwen3_vl", "qwen3_5", "glm4v")
    cases = {
        1: [*((f, ()) for f in families), ("qwen3_vl", ("--packed",)), ("qwen3_vl", ("--checkpointing",))],
        2: [
            *((f, ()) for f in families),
            ("qwen3_vl", ("--packed",)),
            ("qwen3_5", ("--shared",)),
            ("qwen3_vl", ("--checkpointing", "--shared")),
        ],
        4: [("qwen3_vl", ())],
    }
    return Launches(
        assets["dir"] / "runs",
        {
            ranks: [
                ("update", assets["models"][f], assets["records"], _name(f, flags), *FRAMES, *flags)
                for f, flags in planned
            ]
            for ranks, planned in cases.items()
        },
        ("--sp", "2"),
    )


def _update(launches: Launches, family: str, ranks: int, *flags: str):
    """``dist_worker.py update`` of ``family`` with ``flags`` on one process or ``ranks`` ranks
    in sequence-parallel pairs: (weights, metrics)."""
    return launches.update(ranks, _name(family, flags))


@pytest.mark.parametrize("family", ["qwen2_5_vl", "qwen3_vl", "qwen3_5", "glm4v"])
def test_sp2_update_equals_the_single_process_update(launches, family):
    assert_same_update(_update(launches, family, 1), _update(launches, family, 2))


# Qwen3-VL (DeepStack, interleaved M-RoPE); Qwen2.5-VL's windowed tower is split over the group in the
# unpacked test, and Qwen3.5 packs as blocks (the shared-prefix test)
@pytest.mark.parametrize("family", ["qwen3_vl"])
def test_sp2_packed_update_equals_the_single_process_packed_update(launches, family):
    """Packed rows: each sequence's boundaries kept across the shards (1,200-token video prompts)."""
    assert_same_update(_update(launches, family, 1, "--packed"), _update(launches, family, 2, "--packed"))


def test_sp2_shared_prefix_update_equals_the_single_process_update(launches):
    """Each prompt once in the row, its shards shared by the group, the responses after it, and
    Qwen3.5's DeltaNet heads split over the ranks: the same update as one process running every
    sequence in its own row."""
    one = _update(launches, "qwen3_5", 1)
    assert_same_update(one, _update(launches, "qwen3_5", 2, "--shared"))


def test_sp2_times_dp2_update_equals_the_single_process_update(launches):
    """4 ranks: two data-parallel groups (3 + 1 prompts) of two sequence-parallel ranks."""
    assert_same_update(_update(launches, "qwen3_vl", 1), _update(launches, "qwen3_vl", 4))


def test_sp2_update_with_gradient_checkpointing_equals_the_single_process_update(launches):
    """With shared prefixes too: the recomputed layers read the layouts (sequence-parallel and
    shared) of the forward they recompute."""
    one = _update(launches, "qwen3_vl", 1, "--checkpointing")
    assert_same_update(one, _update(launches, "qwen3_vl", 2, "--checkpointing", "--shared"))


def test_a_training_run_under_sequence_parallelism(demo_assets, tmp_path):
    """Warm-up, hybrid groups, dynamic sampling, a greedy baseline (ReMax), validation and a
    checkpoint with the sequence split over 2 ranks, composed with LoRA, gradient checkpointing,
    token-budget micro-batches and the frozen tower's reused features. Each prompt is generated
    once across the pair: every round, each rank's engine generates for its own half of the
    prompts (the other half is the other rank's), greedy baselines and validation too, and both
    ranks train on the same experience."""
    out = tmp_path / "run"
    args = [
        str(HERE / "sp_train_worker.py"),
        str(tmp_path),
        "train",
        f"data.train_files=[{demo_assets['train']}]",
        f"data.val_files=[{demo_assets['val']}]",
        f"model.path={demo_assets['model']}",
        f"trainer.output_dir={out}",
        "data.video_nframes=4",
        "data.video_fps=null",
        "rollout.n=4",
        "rollout.max_new_tokens=6",
        "rollout.hybrid=always",
        "trainer.prompts_per_step=4",
        "trainer.mini_batch_prompts=4",
        "trainer.max_steps=2",
        "trainer.sft_warmup_steps=2",
        "trainer.sft_batch_size=4",
        "trainer.val_size=4",
        "trainer.loggers=[jsonl]",
        "distributed.sequence_parallel_size=2",
        "model.lora.rank=4",
        "model.gradient_checkpointing=true",
        "model.freeze_vision_tower=true",
        "trainer.max_tokens_per_micro_batch=400",
        "algorithm.adv_estimator=REMAX",
        "algorithm.online_filtering.enable=true",
        "algorithm.online_filtering.max_tries=2",
    ]
    r = _torchrun(2, *args)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in rows if "actor/pg_loss" in m]
    assert [m["step"] for m in steps] == [1, 2] and all(m["actor/grad_norm"] > 0 for m in steps)
    # each prompt counted once: 4 prompts x 4 responses, not twice that
    assert all(m["hybrid/groups_with_offline"] == 4 for m in steps)
    assert (out / "checkpoints" / "step_2" / "adapter").is_dir()
    seen = [json.loads((tmp_path / f"rank_{rank}.json").read_text()) for rank in (0, 1)]
    rounds = [s["rounds"] for s in seen]
    assert len(rounds[0]) == len(rounds[1]) >= 2  # a round per step at least, in step
    for mine, theirs in zip(*rounds, strict=True):
        # 4 prompts a round: 2 each (before the split, each rank's engine generated all 4)
        assert len(mine["records"]) == len(theirs["records"]) == 2
        assert not set(mine["records"]) & set(theirs["records"])
        assert mine["generated_prompts"] == theirs["generated_prompts"] == 2
    assert len(seen[0]["steps"]) == 2 and seen[0]["steps"] == seen[1]["steps"]  # the same experience
    # one greedy response per prompt a step trains on (the groups dynamic sampling kept), halved
    prompts = [s["prompts"] for s in seen[0]["steps"]]
    greedy = list(zip(seen[0]["greedy"], seen[1]["greedy"], strict=True))
    assert [a + b for a, b in greedy] == prompts and all(abs(a - b) <= 1 for a, b in greedy)
    # validation (before and after the warm-up, at the end): 2 of the 4 prompts each
    assert seen[0]["validation"] == seen[1]["validation"] == [2, 2, 2]


def test_what_cannot_be_split_is_refused_with_the_key(tmp_path):
    from transformers import AutoModelForImageTextToText

    qwen3_5 = AutoModelForImageTextToText.from_pretrained(make_tiny_model(str(tmp_path / "q35"), "qwen3_5"))
    heads = qwen3_5.config.text_config.linear_num_value_heads
    with pytest.raises(ValueError, match=rf"sequence_parallel_size={heads + 1} must divide the model's"):
        check(qwen3_5, heads + 1)
    qwen3 = AutoModelForImageTextToText.from_pretrained(make_tiny_model(str(tmp_path / "q3"), "qwen3_vl"))
    with pytest.raises(
        ValueError,
        match=r"distributed.sequence_parallel_size=3 must divide the model's attention heads \(4\)",
    ):
        check(qwen3, 3)
    with pytest.raises(
        ValueError, match=r"distributed.sequence_parallel_size=2 must divide the number of ranks \(3\)"
    ):
        _sequence_parallel_groups(0, 3, DistributedConfig(sequence_parallel_size=2))
    with pytest.raises(ValueError, match="distributed.sequence_parallel_size"):
        DistributedConfig(sequence_parallel_size=0)


def test_overlapping_rollouts_are_refused_under_sequence_parallelism(make_cfg):
    from easyvideor1.trainer.build import check_sequence_parallel

    cfg = make_cfg("distributed.sequence_parallel_size=2", "rollout.mode=one_step_off")
    with pytest.raises(
        ValueError, match="distributed.sequence_parallel_size=2 runs with rollout.mode=sync only"
    ):
        check_sequence_parallel(cfg, None)


def test_frame_split_gives_each_rank_contiguous_frames_balanced_by_patches():
    import torch

    from easyvideor1.models.sequence_parallel import frame_split

    # one video of 8 temporal patches: 4 each
    assert frame_split(torch.tensor([[8, 4, 4]]), 2) == [[(0, 0, 4, 16)], [(0, 4, 4, 16)]]
    # an image and a 3-patch video: the image (16 patches) balances the video (12)
    assert frame_split(torch.tensor([[1, 4, 4], [3, 2, 2]]), 2) == [[(0, 0, 1, 16)], [(1, 0, 3, 4)]]
    # every rank keeps at least one frame; fewer frames than ranks: no split
    assert [len(r) for r in frame_split(torch.tensor([[2, 8, 8], [1, 2, 2], [1, 2, 2]]), 4)] == [1, 1, 1, 1]
    assert frame_split(torch.tensor([[1, 4, 4]]), 2) == []


def test_the_256_frame_gpu_recipe_loads_with_sequence_parallelism():
    from pathlib import Path

    from easyvideor1.config import RunConfig, load_config

    path = Path(__file__).resolve().parents[2] / "configs" / "qwen3vl_8b_256f_sp.yaml"
    cfg = load_config(RunConfig, str(path), [])
    assert cfg.distributed.sequence_parallel_size == 2 and cfg.data.video_max_frames == 256
    assert cfg.trainer.prompts_per_step % (8 // 2) == 0  # 4 data-parallel groups on 8 GPUs


def test_the_shares_of_a_group_merge_into_the_experience_of_the_whole_batch():
    """The ranks of a sequence-parallel group collect contiguous shares of the prompts (3 prompts:
    1 and 2); merged, they are the experience of all prompts collected at once, episodes' fields
    and engine log-probs included; counts add up, rates average over the shares."""
    import torch

    from easyvideor1.trainer.distributed import DistState, group_shares
    from easyvideor1.trainer.experience import Response, stacked
    from easyvideor1.trainer.rounds import merge_shares

    def response(p: int, i: int) -> Response:
        n = 2 + p + i
        ids = torch.arange(n) + 10 * p
        if p == 1 and i == 0:  # an episode: a tool turn (not the policy's) and its media
            policy = torch.tensor([1] + [0] * (n - 2) + [1])
            types = torch.tensor([0] * (n - 1) + [2])
            return Response(
                ids, f"{p}.{i}", False, False, policy=policy, media={"x": torch.ones(1)}, types=types
            )
        logp = None if i == 1 else -torch.rand(n)
        return Response(ids, f"{p}.{i}", offline=i == 1, truncated=p == 2, logp=logp)

    groups = [[response(p, i) for i in range(2)] for p in range(3)]

    def experience(groups, metrics):
        exp = stacked(None, groups, pad_id=0)
        exp.scores = {"overall": exp.mask.sum(1).float()}
        exp.tasks = ["t"] * len(exp)
        exp.metrics = metrics
        return exp

    whole = experience(groups, {})
    shares = group_shares(3, DistState(world=2, sp_size=2))
    assert shares == [range(0, 1), range(1, 3)]
    share_metrics = [
        {"reward/errors": 1.0, "tools/call_rate": 0.5},
        {"reward/errors": 2.0, "tools/call_rate": 1.0},
    ]
    pieces = [experience(groups[s.start : s.stop], m) for s, m in zip(shares, share_metrics, strict=True)]
    merged = merge_shares(pieces, "batch")
    assert merged.batch == "batch" and merged.prompt_of == whole.prompt_of and merged.texts == whole.texts
    for name in ("ids", "mask", "offline", "truncated", "valid", "response_types"):
        assert torch.equal(getattr(merged, name), getattr(whole, name)), name
    torch.testing.assert_close(merged.rollout_logp, whole.rollout_logp, equal_nan=True)
    torch.testing.assert_close(merged.scores["overall"], whole.scores["overall"])
    assert [m is None for m in merged.response_media] == [m is None for m in whole.response_media]
    assert merged.metrics == {"reward/errors": 3.0, "tools/call_rate": 0.75}
    # an empty share (fewer prompts than ranks) adds nothing
    assert merge_shares([pieces[1], None], "batch").texts == pieces[1].texts


def test_span_attention_equals_the_dense_mask_on_every_real_position():
    """The attention after the exchange, without an S x S mask: each sequence's stretch through the
    causal kernel equals the dense mask (causal, real keys, one packed sequence) on every real
    query, for left- and right-padded rows and a packed row; a sequence with a hole in it is left
    to the dense mask."""
    import torch

    from easyvideor1.models.sequence_parallel import SPGroup, _Layout, _mask, causal_spans, span_attention

    torch.manual_seed(0)
    length = 12
    valid = torch.ones(3, length, dtype=torch.bool)
    valid[0, :3] = False  # a left-padded prompt and a right-padded response
    valid[0, 10:] = False
    valid[1, 7:] = False  # right padding only
    layouts = {"padded": (valid, None)}
    packed_valid = torch.ones(1, length, dtype=torch.bool)
    packed_valid[0, 10:] = False  # the sequence-parallel padding after the last sequence
    segments = torch.tensor([[1, 1, 1, 1, 2, 2, 2, 3, 3, 3, -1, -1]])
    layouts["packed"] = (packed_valid, segments)
    for name, (key_valid, seg) in layouts.items():
        q, k, v = (torch.randn(key_valid.shape[0], 2, length, 8) for _ in range(3))
        spans = causal_spans(key_valid, seg)
        assert spans is not None, name
        dense = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, attn_mask=_mask(_Layout(SPGroup(None, 1, 0), key_valid, seg), length, "cpu")
        )
        out = span_attention(q, k, v, spans)
        real = key_valid[:, None, :, None].expand_as(out)
        torch.testing.assert_close(out[real], dense[real], msg=name)
    assert causal_spans(valid, None) == [[(3, 12)], [(0, 12)], [(0, 12)]]
    assert causal_spans(packed_valid, segments) == [[(0, 4), (4, 7), (7, 12)]]
    holed = torch.ones(1, length, dtype=torch.bool)
    holed[0, 5] = False
    assert causal_spans(holed, None) is None
