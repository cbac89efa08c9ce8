"""The HF engine in a process of its own (``rollout.placement: separate``).

The trainer keeps a proxy, :class:`RemoteHFEngine`; a child process (``python -m
easyvideor1.rollout.remote``) loads the checkpoint and runs :class:`~.hf.HFRolloutEngine` on its
own copy of the weights, with its own CPU threads (or its own GPU). So generation and the update
truly run at once, not two threads of one interpreter sharing its lock and its cores.

Everything crosses the child's stdin / stdout as frames: a JSON header and, where there are
tensors, a safetensors payload (prompt tensors one way; response ids, masks and log-probs back;
weights after each update, in chunks). Nothing is pickled, so nothing the child sends can run code
in the trainer. The proxy encodes prompts and runs episodes and the request queue itself with the
trainer's processor (tool turns need the trainer's tools and frame cache); only ``generate`` and
the weights travel.
"""

from __future__ import annotations

import dataclasses
import json
import os
import struct
import subprocess
import sys
import threading
from collections.abc import Iterable
from typing import Any, BinaryIO

import torch
from safetensors.torch import load as load_tensors
from safetensors.torch import save as save_tensors

from ..errors import UserError
from ..models.inputs import PromptBatch
from .base import Responses, SamplingConfig, banned_token_ids
from .hf import HFRolloutEngine

# weights travel in chunks of about this many bytes, so neither side holds two full copies
WEIGHT_CHUNK_BYTES = 256 << 20
_HEADER = struct.Struct("<QQ")  # JSON length, payload length


def write_frame(
    out: BinaryIO, header: dict[str, Any], tensors: dict[str, torch.Tensor] | None = None
) -> None:
    """One frame: a JSON header, then the tensors as safetensors bytes (none: an empty payload)."""
    meta = json.dumps(header).encode()
    payload = save_tensors({k: v.contiguous() for k, v in tensors.items()}) if tensors else b""
    out.write(_HEADER.pack(len(meta), len(payload)))
    out.write(meta)
    out.write(payload)
    out.flush()


def read_frame(src: BinaryIO) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """The header and tensors of the next frame; EOFError when the other side has gone."""
    head = _read_exact(src, _HEADER.size)
    n_meta, n_payload = _HEADER.unpack(head)
    header = json.loads(_read_exact(src, n_meta))
    tensors = load_tensors(_read_exact(src, n_payload)) if n_payload else {}
    return header, tensors


def _read_exact(src: BinaryIO, n: int) -> bytes:
    chunks, left = [], n
    while left:
        chunk = src.read(left)
        if not chunk:
            raise EOFError("the other side closed the channel")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


class RemoteHFEngine(HFRolloutEngine):
    """The :class:`~.base.RolloutEngine` protocol over an HF engine in a child process.

    Args:
        model_path: The checkpoint the child loads (the trainer pushes its own weights right after).
        processor: The trainer's processor (prompts are encoded here).
        model: The trainer's model, read for its family and end-of-turn ids only.
        dtype: ``model.dtype``.
        attn_implementation: ``model.attn_implementation`` (the child generates as the policy would).
        device: Where the child generates (``cpu``, ``cuda:1``, ...).
        threads: The child's intra-op CPU threads.
        seed: The child's generator seed.
    """

    owns_weights = True

    def __init__(
        self,
        model_path,
        processor,
        model,
        dtype="float32",
        device="cpu",
        threads=1,
        seed=0,
        attn_implementation="sdpa",
    ):
        from ..models.families import family_of_model

        self.processor, self._family, self.max_batch = processor, family_of_model(model).model_type, 16
        self.model = None  # the weights live in the child
        tok = processor.tokenizer
        self.banned = banned_token_ids(tok)
        eos = model.generation_config.eos_token_id
        self.eos_ids = [eos] if isinstance(eos, int) else list(eos or [tok.eos_token_id])
        self.pad_id = tok.pad_token_id if tok.pad_token_id is not None else self.eos_ids[0]
        env = dict(os.environ, OMP_NUM_THREADS=str(threads))
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "easyvideor1.rollout.remote"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
        )
        self._lock = threading.Lock()  # one request at a time on the channel
        start = {"path": str(model_path), "dtype": dtype, "device": device, "threads": threads, "seed": seed}
        start["attn_implementation"] = attn_implementation
        self._call({"op": "start", **start})

    def _call(self, header: dict, tensors: dict | None = None) -> tuple[dict, dict]:
        with self._lock:
            if self._proc.poll() is not None:
                raise RuntimeError(
                    f"the rollout engine process exited with code {self._proc.returncode} (its log is above)"
                )
            try:
                write_frame(self._proc.stdin, header, tensors)
                reply, out = read_frame(self._proc.stdout)
            except (EOFError, BrokenPipeError) as e:
                code = self._proc.wait()
                raise RuntimeError(
                    f"the rollout engine process exited with code {code} during {header['op']!r} "
                    "(its log is above)"
                ) from e
        if "error" in reply:  # the child's user error (a checkpoint path, a record) stays one
            error = UserError if reply.get("user") else RuntimeError
            raise error(f"rollout engine process, {header['op']}: {reply['error']}")
        return reply, out

    @torch.no_grad()
    def generate(self, batch: PromptBatch, repeats: list[int], sampling: SamplingConfig) -> Responses:
        if sum(repeats) == 0:
            empty = torch.zeros((0, 0), dtype=torch.long)
            return Responses(ids=empty, mask=empty, texts=[], truncated=[])
        tensors = {k: v.cpu() for k, v in batch.inputs.items() if isinstance(v, torch.Tensor)}
        plain = {k: v for k, v in batch.inputs.items() if not isinstance(v, torch.Tensor)}
        header = {
            "op": "generate",
            "repeats": list(repeats),
            "sampling": dataclasses.asdict(sampling),
            "video_counts": list(batch.video_counts),
            "pixel_rows": batch.pixel_rows,
            "image_counts": list(batch.image_counts),
            "plain": plain,  # processor outputs that are not tensors (JSON: numbers and lists)
        }
        reply, out = self._call(header, tensors)
        return Responses(
            ids=out["ids"],
            mask=out["mask"],
            texts=reply["texts"],
            truncated=reply["truncated"],
            logprobs=out.get("logprobs"),
        )

    def reseed(self, seed: int) -> None:
        self._call({"op": "seed", "seed": int(seed)})

    def update_weights(self, named_tensors: Iterable[tuple[str, torch.Tensor]]) -> None:
        """Send full weights by name, as safetensors chunks (shared storage copied apart)."""
        chunk: dict[str, torch.Tensor] = {}
        size = 0
        for name, tensor in named_tensors:
            chunk[name] = tensor.detach().to("cpu", copy=True)
            size += tensor.numel() * tensor.element_size()
            if size >= WEIGHT_CHUNK_BYTES:
                self._call({"op": "weights"}, chunk)
                chunk, size = {}, 0
        if chunk:
            self._call({"op": "weights"}, chunk)

    def close(self) -> None:
        """Stop the request worker and the child process."""
        self._queue_stop()
        if self._proc.poll() is None:
            try:
                self._call({"op": "close"})
            except RuntimeError:
                pass
            try:
                self._proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self._proc.kill()

    def __del__(self):  # a trainer that never called close() does not leave the child behind
        proc = getattr(self, "_proc", None)
        if proc is not None and proc.poll() is None:
            proc.kill()


def serve(src: BinaryIO, out: BinaryIO) -> None:
    """The child's loop: frames in, frames out, until ``close`` or the end of ``src``."""
    engine = None
    while True:
        try:
            header, tensors = read_frame(src)
        except EOFError:
            return
        op = header["op"]
        try:
            if op == "close":
                write_frame(out, {"ok": True})
                return
            if op == "start":
                engine = _start(header)
                write_frame(out, {"ok": True})
            elif op == "seed":
                engine.reseed(header["seed"])
                write_frame(out, {"ok": True})
            elif op == "weights":
                engine.update_weights(tensors.items())
                write_frame(out, {"ok": True})
            elif op == "generate":
                batch = PromptBatch(
                    {**tensors, **header["plain"]},
                    header["video_counts"],
                    header["image_counts"],
                    pixel_rows=header.get("pixel_rows"),
                )
                got = engine.generate(batch, header["repeats"], SamplingConfig(**header["sampling"]))
                result = {"ids": got.ids, "mask": got.mask}
                if got.logprobs is not None:
                    result["logprobs"] = got.logprobs
                write_frame(out, {"texts": got.texts, "truncated": list(got.truncated)}, result)
            else:
                write_frame(out, {"error": f"unknown operation {op!r}"})
        except Exception as e:  # the trainer gets the reason; the child keeps serving
            write_frame(out, {"error": f"{type(e).__name__}: {e}", "user": isinstance(e, UserError)})


def _start(header: dict) -> HFRolloutEngine:
    from ..models.loading import load_policy

    torch.set_num_threads(int(header["threads"]))
    torch.manual_seed(int(header["seed"]))
    model, processor = load_policy(
        header["path"], header["dtype"], attn_implementation=header.get("attn_implementation", "sdpa")
    )
    model = model.to(header["device"]).eval().requires_grad_(False)
    return HFRolloutEngine(model, processor, owns_weights=True)


def main() -> None:
    # the channel is this process's own stdout: whatever else prints goes to stderr instead
    channel = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin.buffer, channel)


if __name__ == "__main__":
    main()
