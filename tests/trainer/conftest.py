from __future__ import annotations

import json
import os
import socket
import subprocess
import sys

import pytest

from easyvideor1.config import RunConfig, load_config
from easyvideor1.data.synthetic import write_demo_set
from easyvideor1.models.tiny import make_tiny_model

# an offline first turn of the episode tests: a seek over the first second
CALL = '<tool_call>\n{"name": "seek", "arguments": {"start_s": 0.0, "end_s": 1.0, "num_frames": 2}}\n</tool_call>'


@pytest.fixture(scope="session")
def demo_assets(tmp_path_factory):
    d = tmp_path_factory.mktemp("demo")
    train, val = write_demo_set(str(d / "data"), n_train=24, n_val=8)
    model = make_tiny_model(str(d / "model"), "qwen3vl")
    return {"train": train, "val": val, "model": model, "dir": d}


def base_overrides(assets: dict, output_dir) -> list[str]:
    """The tiny demo run every trainer test starts from (a few prompts, short responses)."""
    return [
        f"data.train_files=[{assets['train']}]",
        f"data.val_files=[{assets['val']}]",
        f"model.path={assets['model']}",
        f"trainer.output_dir={output_dir}",
        "data.video_nframes=4",
        "data.video_fps=null",
        "data.video_min_pixels=1024",
        "data.video_max_pixels=1024",
        "rollout.n=4",
        "rollout.max_new_tokens=6",
        "trainer.prompts_per_step=4",
        "trainer.mini_batch_prompts=2",
        "trainer.micro_batch_size=3",
        "trainer.max_steps=2",
        "trainer.lr=1e-3",
        "trainer.loggers=[jsonl]",
        "trainer.val_size=4",
        # a test trains 1-3 steps, so media loaded ahead for the next draw would mostly go unused;
        # prefetching is checked on its own (test_prefetch.py: equal to a run without it)
        "data.prefetch=false",
    ]


@pytest.fixture
def make_cfg(demo_assets, tmp_path):
    def build(*overrides: str) -> RunConfig:
        return load_config(RunConfig, None, base_overrides(demo_assets, tmp_path / "run") + list(overrides))

    return build


def free_port() -> int:
    """A TCP port nobody listens on now (for torchrun's rendezvous)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def turns_file(demo_assets):
    """The demo's training records with an offline episode each: a seek call, then the answer."""
    rows = [json.loads(line) for line in open(demo_assets["train"])]
    for r in rows:
        r["offline_turns"] = [CALL, r["offline_output"]]
    path = demo_assets["dir"] / "data" / "train_turns.jsonl"  # beside the videos it names
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def train_in_subprocess(overrides: list[str], ranks: int = 1) -> subprocess.CompletedProcess:
    """``easyvideor1 train`` in a subprocess (vLLM changes process state; the environment is
    vLLM-CPU's, harmless without it), on ``ranks`` torchrun ranks; fails the test with the run's
    output if it fails."""
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "TOKENIZERS_PARALLELISM": "false",
    }
    launch = [sys.executable]
    if ranks > 1:
        launch += ["-m", "torch.distributed.run", f"--nproc-per-node={ranks}", f"--master-port={free_port()}"]
    r = subprocess.run(
        [*launch, "-m", "easyvideor1", "train", *overrides],
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
    )
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-5000:]
    return r


def run_worker(script: str, *args: str, ranks: int = 1) -> None:
    """A test worker script (``tests/trainer/*_worker.py``) in one plain process (``ranks=1``) or
    under torchrun; one thread per process, the repository on the path; fails the test with the
    worker's output if it fails."""
    here = os.path.dirname(os.path.abspath(__file__))
    env = dict(os.environ, OMP_NUM_THREADS="1", TOKENIZERS_PARALLELISM="false")
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(os.path.dirname(here)), env.get("PYTHONPATH", "")])
    launch = [sys.executable]
    if ranks > 1:
        launch += ["-m", "torch.distributed.run", f"--nproc-per-node={ranks}", "--master-addr=127.0.0.1"]
        launch += [f"--master-port={free_port()}"]
    r = subprocess.run(
        [*launch, os.path.join(here, script), *args], capture_output=True, text=True, env=env, timeout=300
    )
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-3000:]
