"""torchrun + FSDP2 on the CPU (gloo): modality-safe ranks, 1-vs-2-rank equivalence, sharded
checkpoints resumed on another number of ranks, a two-"node" launch over loopback, and start-up
errors that stop every rank. Real subprocesses throughout; each launch costs ~10-15 s of imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from tests.conftest import write_modality_records

from .conftest import base_overrides, free_port

pytestmark = pytest.mark.slow
HERE = Path(__file__).parent
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE.parent.parent), env.get("PYTHONPATH", "")])
    return env


def _run(args: list[str], timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=_env())


def _torchrun(nproc: int, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    port = str(free_port())
    return _run(
        [*TORCHRUN, f"--nproc-per-node={nproc}", "--master-addr=127.0.0.1", f"--master-port={port}", *args],
        timeout,
    )


@dataclass
class Launches:
    """``dist_worker.py`` cases run together: every case for a number of ranks in one launch
    (``dist_worker.py cases``: the imports and the process group paid once, not once a case),
    started by the first test that reads one of its outputs. ``cases`` maps a number of ranks to
    its cases, ``(MODE, MODEL, RECORDS, NAME, *FLAGS)``; a case writes ``directory/RANKS_NAME``."""

    directory: Path
    cases: dict[int, list[tuple[str, ...]]]
    launch_flags: tuple[str, ...] = ()
    logs: dict[int, str] = field(default_factory=dict)

    def output(self, ranks: int, name: str) -> Path:
        if ranks not in self.logs:
            self.logs[ranks] = self._launch(ranks)
        out = self.directory / f"{ranks}_{name}"
        assert out.exists(), self.logs[ranks]  # a failed case stops its launch: no file from it on
        return out

    def update(self, ranks: int, name: str) -> tuple[dict[str, torch.Tensor], dict]:
        """An ``update`` or ``episodes`` case's full weights after the update and its metrics."""
        return _load(self.output(ranks, name))

    def _launch(self, ranks: int) -> str:
        plan = [
            [mode, model, records, str(self.directory / f"{ranks}_{name}"), *flags]
            for mode, model, records, name, *flags in self.cases[ranks]
        ]
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"plan_{ranks}.json"
        path.write_text(json.dumps(plan))
        args = [str(HERE / "dist_worker.py"), "cases", str(path), *self.launch_flags]
        r = _run([sys.executable, *args], 600) if ranks == 1 else _torchrun(ranks, *args, timeout=600)
        return r.stdout[-3000:] + r.stderr[-3000:]


@pytest.fixture(scope="module")
def records(tmp_path_factory, demo_assets) -> str:
    """One prompt of each kind: a video, an image, text only, and video + image together."""
    return write_modality_records(tmp_path_factory.mktemp("kinds"), 4, 0, ("A. red", "B. blue"))


@pytest.fixture(scope="module")
def launches(demo_assets, records, tmp_path_factory) -> Launches:
    """The demo model's modality pairs (2 ranks) and its float32, episode and bfloat16 updates
    (1 process and 2 ranks): one launch for each number of ranks."""
    model = str(demo_assets["model"])
    updates = [("update", model, records, "update"), ("episodes", model, records, "episodes")]
    return Launches(
        tmp_path_factory.mktemp("launches"),
        {
            1: updates,
            2: [
                ("modalities", model, records, "pairs.json"),
                *updates,
                ("update", model, records, "bf16", "--bf16", "--checkpointing"),
            ],
        },
    )


def test_every_modality_pair_across_two_ranks_completes(launches):
    pairs = json.loads(launches.output(2, "pairs.json").read_text())
    assert len(pairs) == 16 and ["video", "text"] in pairs and ["text", "mixed"] in pairs


def test_without_the_dummy_vision_pass_mismatched_ranks_fail_fast(demo_assets, records, tmp_path):
    """The same run with the dummy pass disabled dies (not hangs) at the first pair whose ranks make
    different vision-tower calls: video on rank 0, image on rank 1 still matches (one tower call
    each), video/text does not."""
    out = tmp_path / "pairs.json"
    t0 = time.perf_counter()
    r = _torchrun(
        2,
        str(HERE / "dist_worker.py"),
        "modalities",
        str(demo_assets["model"]),
        records,
        str(out),
        "--no-dummy",
    )
    elapsed = time.perf_counter() - t0
    assert r.returncode != 0
    assert not out.exists()
    log = r.stdout + r.stderr
    assert "pair video/video ok" in log and "pair video/text ok" not in log
    assert elapsed < 120, f"took {elapsed:.0f} s: a hang until the timeout, not a fast failure"


def _load(path: Path) -> tuple[dict[str, torch.Tensor], dict]:
    with safe_open(str(path), "pt") as f:
        return {k: f.get_tensor(k) for k in f.keys()}, json.loads(f.metadata()["metrics"])


@pytest.fixture(scope="module")
def single_update(launches):
    """The float32 ``update`` in one process: the reference of the float32 and the bfloat16
    2-rank updates."""
    return launches.update(1, "update")


def assert_same_update(one, two) -> None:
    """Loss, gradient norm and updated weights agree to float32 rounding (reduction order differs)."""
    (w1, m1), (w2, m2) = one, two
    assert m1["actor/pg_loss"] == pytest.approx(m2["actor/pg_loss"], rel=1e-5, abs=1e-7)
    assert m1["actor/grad_norm"] == pytest.approx(m2["actor/grad_norm"], rel=1e-5)
    assert m1["actor/grad_norm"] > 0
    assert w1.keys() == w2.keys()
    worst = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    assert worst < 1e-6, worst


def test_two_rank_update_equals_single_process_update(demo_assets, launches, single_update):
    """Same global batch (4 prompts, 8 sequences): 2 ranks with an uneven split (3 + 1 prompts, so
    rank 1 runs filler micro-batches) versus one process."""
    one = single_update
    assert_same_update(one, launches.update(2, "update"))
    base = _load_base(demo_assets["model"])
    moved = max(float((one[0][k] - base[k]).abs().max()) for k in one[0] if k in base)
    assert moved > 1e-4  # the update did something, so agreeing is not trivial


def test_two_rank_episode_update_equals_single_process_update(launches):
    """The same with episodes: each response to a video prompt is a seek call, its real result (a
    tool turn with frames, masked out of the loss) and the answer; rank 0 holds one video prompt
    among text and image ones, rank 1 the mixed one, so the ranks' sequences, media and turn
    layouts differ."""
    assert_same_update(launches.update(1, "episodes"), launches.update(2, "episodes"))


def test_bf16_mixed_precision_with_gradient_checkpointing_tracks_float32(launches, single_update):
    """FSDP2 with bfloat16 compute (float32 master weights, float32 gradient reduction) and
    gradient checkpointing: the same update as float32 up to bfloat16 rounding."""
    w1, m1 = single_update
    w2, m2 = launches.update(2, "bf16")
    assert all(v.dtype == torch.float32 for v in w2.values())  # master weights stay float32
    assert m2["actor/pg_loss"] == pytest.approx(m1["actor/pg_loss"], rel=0.05, abs=1e-3)
    assert m2["actor/grad_norm"] == pytest.approx(m1["actor/grad_norm"], rel=0.05)
    worst = max(float((w1[k] - w2[k]).abs().max()) for k in w1)
    assert worst < 0.05, worst


def _load_base(model_dir) -> dict[str, torch.Tensor]:
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(model_dir).state_dict()


def _train_args(demo_assets, out: Path, *extra: str) -> list[str]:
    return ["-m", "easyvideor1", "train", *base_overrides(demo_assets, out), *extra]


def test_sharded_checkpoint_resumes_on_another_number_of_ranks(demo_assets, tmp_path):
    out = tmp_path / "run"
    r = _torchrun(2, *_train_args(demo_assets, out, "trainer.max_steps=2", "trainer.save_every=1"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    ckpt = out / "checkpoints" / "step_2"
    shards = sorted(p.name for p in (ckpt / "sharded").iterdir())
    assert len(shards) == 2 and all(s.endswith(".safetensors") for s in shards)
    assert sorted(p.name for p in (ckpt / "rng").iterdir()) == ["rank_0.safetensors", "rank_1.safetensors"]
    assert not list(out.rglob("*.pt")) and not list(out.rglob("*.bin"))
    assert json.loads((ckpt / "trainer_state.json").read_text())["world_size"] == 2

    # the HF export equals what DCP reshards into a single process
    from transformers import AutoModelForImageTextToText

    from easyvideor1.trainer.checkpoint import load_checkpoint

    exported = AutoModelForImageTextToText.from_pretrained(ckpt)
    fresh = AutoModelForImageTextToText.from_pretrained(demo_assets["model"])
    opt = torch.optim.AdamW(fresh.parameters(), lr=1e-3)
    meta = load_checkpoint(ckpt, fresh, opt, None)
    assert meta["step"] == 2
    for (name, a), (_, b) in zip(exported.state_dict().items(), fresh.state_dict().items(), strict=True):
        assert torch.equal(a, b), name
    # 2 RL steps x 2 mini-batches: the AdamW step count and moments came back too
    assert {float(s["step"]) for s in opt.state.values()} == {4.0}
    assert all(float(s["exp_avg_sq"].abs().sum()) > 0 for s in opt.state.values())

    # and a single process continues the 2-rank run
    r = _run([sys.executable, *_train_args(demo_assets, out, "trainer.max_steps=3")])
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in steps if "actor/pg_loss" in m] == [1, 2, 3]


def test_two_nodes_over_loopback_train_together(demo_assets, tmp_path):
    """Two torchrun launchers, one process each, as node 0 and node 1 of a c10d rendezvous."""
    port = free_port()
    out = tmp_path / "run"
    args = _train_args(demo_assets, out, "trainer.max_steps=1")

    def launcher(node: int) -> subprocess.Popen:
        cmd = [
            *TORCHRUN,
            "--nnodes=2",
            f"--node-rank={node}",
            "--nproc-per-node=1",
            "--rdzv-backend=c10d",
            f"--rdzv-endpoint=127.0.0.1:{port}",
            "--rdzv-id=loopback",
            *args,
        ]
        return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=_env())

    procs = [launcher(0), launcher(1)]
    logs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], logs[0][-3000:] + logs[1][-3000:]
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in metrics if m.get("step") == 1 and "actor/pg_loss" in m)
    assert "perf/rank_token_imbalance" in step  # metrics came from two ranks
    assert (out / "checkpoints" / "step_1" / "model.safetensors").exists()


def test_a_missing_cache_entry_stops_every_rank_at_start_up(demo_assets, tmp_path):
    """The 24 training prompts fall in rank 0's preflight block; rank 1, which checked nothing
    wrong, must still stop with the same message instead of waiting in a collective."""
    (tmp_path / "empty_cache").mkdir()
    t0 = time.perf_counter()
    r = _torchrun(
        2,
        *_train_args(
            demo_assets,
            tmp_path / "run",
            "trainer.max_steps=1",
            "data.cache_mode=cache_only",
            f"data.cache_dir={tmp_path / 'empty_cache'}",
        ),
        timeout=240,
    )
    assert r.returncode != 0
    log = r.stdout + r.stderr
    # every record is skipped (no cache entry), so both ranks raise the same start-up error
    assert log.count("train: no record can be used: the media of all 24 could not be loaded") >= 2, log[
        -4000:
    ]
    assert "no cache entry" in log
    assert time.perf_counter() - t0 < 120


def test_a_bad_video_found_by_rank_1_is_skipped_by_every_rank(demo_assets, tmp_path):
    """Issue 11 item 7 under torchrun: record 35 lies in rank 1's preflight block; the skip is
    shared, so both ranks train on the same 39 prompts and the record is listed and counted once."""
    rows = [json.loads(line) for line in open(demo_assets["train"])]
    for r in rows:
        r["videos"] = [str(demo_assets["dir"] / "data" / r["videos"][0])]
    rows += [{**r, "problem_id": f"{r['problem_id']}-again"} for r in rows[:16]]
    rows[35]["videos"] = [str(tmp_path / "missing.mp4")]
    data = tmp_path / "forty.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "run"
    r = _torchrun(2, *_train_args(demo_assets, out, "trainer.max_steps=1", f"data.train_files=[{data}]"))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    skipped = [json.loads(line) for line in open(out / "skipped_records.jsonl")]
    assert [(s["index"], s["source"]) for s in skipped] == [(35, f"{data}:36")]
    assert "preflight train: 39 prompts kept" in r.stdout
    step = next(m for m in map(json.loads, open(out / "metrics.jsonl")) if "actor/pg_loss" in m)
    assert step["data/skipped_records"] == 1


def test_a_rank_whose_whole_share_fails_at_a_step_stops_every_rank(demo_assets, tmp_path):
    """With data.preflight=fast a corrupt video is found at its step. When it is the whole of one
    rank's share, that rank cannot go on; the stop is agreed on, so every rank stops with the
    reason (before, the other rank met a dead peer in its next collective: on gloo a "Connection
    closed by peer" error, on NCCL a wait until the collective timeout)."""
    rows = [json.loads(line) for line in open(demo_assets["train"])][:4]
    for r in rows:
        r["videos"] = [str(demo_assets["dir"] / "data" / r["videos"][0])]
    corrupt = tmp_path / "corrupt.mp4"
    corrupt.write_bytes(b"\x00\x00\x00\x18ftypmp42" + bytes(range(256)) * 8)
    rows[2]["videos"] = [str(corrupt)]
    data = tmp_path / "four.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    extra = ["data.preflight=fast", f"data.train_files=[{data}]", "trainer.prompts_per_step=2"]
    t0 = time.perf_counter()
    r = _torchrun(2, *_train_args(demo_assets, tmp_path / "run", *extra, "trainer.max_steps=4"), timeout=240)
    assert r.returncode != 0
    assert "no record of this step could be loaded" in r.stderr, r.stderr[-3000:]
    assert "another rank stopped the run" in r.stderr, r.stderr[-3000:]
    assert time.perf_counter() - t0 < 200


def test_two_ranks_with_reference_model_kl_and_dynamic_sampling(demo_assets, tmp_path):
    """The supervised warm-up, then the sharded reference policy taken from it (its own dummy vision
    passes, saved sharded with the checkpoint), the adaptive KL controller fed
    with token-weighted KL summed over ranks, dynamic-sampling rounds decided jointly, and a
    batch-wide estimator (REINFORCE++ whitens over the gathered batch) all run under FSDP2, with
    rollouts one step off: step 1's rounds run in the trainer's thread, step 2's in the rollout
    thread during step 1's update (their joint decisions on a process group of their own), and
    the checkpoint at step 1 lets step 2's batch in flight finish first."""
    out = tmp_path / "run"
    extra = [
        "rollout.hybrid=always",
        "algorithm.adv_estimator=reinforce_plus_plus",
        "algorithm.kl.type=k3",
        "algorithm.kl.controller=adaptive",
        "algorithm.online_filtering.enable=true",
        "algorithm.online_filtering.max_tries=2",
        "trainer.sft_warmup_steps=2",  # the warm-up under FSDP; the reference then takes its weights
        "trainer.sft_batch_size=4",
        "trainer.save_every=1",
        "rollout.mode=one_step_off",
    ]
    r = _torchrun(2, *_train_args(demo_assets, out, *extra))
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    steps = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [m for m in steps if "actor/pg_loss" in m]
    assert [m["step"] for m in steps] == [1, 2]
    assert [m["rollout/staleness_max"] for m in steps] == [0.0, 1.0]
    for m in steps:
        assert m["actor/grad_norm"] > 0 and m["filter/rounds"] >= 1
        assert "actor/kl_loss" in m and "actor/kl_coef" in m
    assert any("sft/loss" in m for m in map(json.loads, (out / "metrics.jsonl").read_text().splitlines()))
    assert len(list((out / "checkpoints" / "step_2" / "reference").glob("*.safetensors"))) == 2
