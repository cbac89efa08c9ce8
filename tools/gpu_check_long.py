"""The GPU check kit's long micro-batch: one sequence at the 8B recipe's longest (a 20,000-token
prompt and a 4,096-token response) through the trainer's log-prob path, forward and backward, on
the kit's model (Qwen3-VL-2B's architecture), as the one-GPU recipe trains it: fp32 master weights,
bf16 compute (autocast), gradient checkpointing.

``python tools/gpu_check_long.py MODEL_DIR PROMPT_TOKENS RESPONSE_TOKENS RESULT.json`` writes the
peak memory of the micro-batch (``torch.cuda.max_memory_allocated`` above the weights on a GPU;
the process's resident high-water mark on a CPU), its seconds, and the attention implementation
the model ran. The prompt is text tokens: the language model and the logits path are what grow
with length (the vision tower's frames are measured by the training phases).
"""

from __future__ import annotations

import json
import resource
import sys
import time


def main(argv: list[str]) -> int:
    import torch

    from easyvideor1.models.loading import load_policy
    from easyvideor1.models.logprobs import response_logprobs
    from easyvideor1.trainer.precision import autocast_forward

    model_dir, prompt_len, response_len, result_path = argv[0], int(argv[1]), int(argv[2]), argv[3]
    cuda = torch.cuda.is_available()
    device = torch.device("cuda" if cuda else "cpu")
    model, processor = load_policy(model_dir, "float32", gradient_checkpointing=True)
    model.to(device).train()
    autocast_forward(model, torch.bfloat16, device)
    tok = processor.tokenizer
    special = set(tok.all_special_ids)
    ordinary = torch.tensor([i for i in range(min(len(tok), 5000)) if i not in special])
    g = torch.Generator().manual_seed(0)
    prompt = ordinary[torch.randint(len(ordinary), (1, prompt_len), generator=g)]
    response = ordinary[torch.randint(len(ordinary), (1, response_len), generator=g)]
    inputs = {
        "input_ids": prompt,
        "attention_mask": torch.ones_like(prompt),
        "mm_token_type_ids": torch.zeros_like(prompt),  # text only: no vision positions
    }
    mask = torch.ones_like(response)
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    logp, _ = response_logprobs(model, inputs, response, mask)
    (-logp.sum() / response_len).backward()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - t0
    out = {
        "prompt_tokens": prompt_len,
        "response_tokens": response_len,
        "seconds": round(seconds, 3),
        "attention_path": model.config._attn_implementation,
        "finite": bool(torch.isfinite(logp).all()),
    }
    if cuda:
        out["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 3)
        out["peak_above_weights_gib"] = round((torch.cuda.max_memory_allocated() - before) / 2**30, 3)
    else:
        out["peak_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)
    with open(result_path, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
