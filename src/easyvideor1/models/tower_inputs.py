"""The smallest real input of a Qwen-style vision tower, and the sum of what a tower returns.

A dummy vision pass (``vision.py``) and the feature cache's warm-up (``vision_cache.py``) run a
tower on its smallest input; a family's vision layout (``families/base.py``) says how. A leaf
module, so that the families and the modules that ask them share it without importing each other.
"""

from __future__ import annotations

import torch


def smallest_vision_input(tower: torch.nn.Module) -> tuple[torch.Tensor, torch.Tensor]:
    """Zero pixels and their grid: the smallest input ``tower`` accepts (one merged token)."""
    cfg = tower.config
    merge = getattr(cfg, "spatial_merge_size", 2)
    patch_dim = cfg.in_channels * cfg.temporal_patch_size * cfg.patch_size**2
    p = next(tower.parameters())
    grid = torch.tensor([[1, merge, merge]], device=p.device)
    return torch.zeros(merge * merge, patch_dim, dtype=p.dtype, device=p.device), grid


def qwen_dummy_output(tower: torch.nn.Module) -> torch.Tensor:
    """The sum of a Qwen-VL tower's outputs on its smallest zero input (one merged token)."""
    x, grid = smallest_vision_input(tower)
    return _sum_outputs(tower(x, grid_thw=grid))


def _sum_outputs(out) -> torch.Tensor:
    """Sum of every tensor a vision tower returns (merged embeddings and DeepStack features)."""
    total = 0.0
    if isinstance(out, torch.Tensor):
        return out.sum()
    for key in ("last_hidden_state", "pooler_output"):
        t = getattr(out, key, None)
        if isinstance(t, torch.Tensor):
            total = total + t.sum()
    for t in getattr(out, "deepstack_features", None) or []:
        total = total + t.sum()
    return total
