"""Chunked log-probs and entropy: the previous plain formula's values (fp32, within 1e-6) with banned
ids, masks, temperature and all -inf rows; autograd's gradient of that formula; a detached entropy;
and no float32 tensor larger than one chunk allocated in the forward or the backward."""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from easyvideor1.models import chunked_logits
from easyvideor1.models.chunked_logits import logprobs_and_entropy
from easyvideor1.models.logprobs import token_logprobs

N, T, V = 3, 10, 50
BANNED = [4, 17]


def previous_token_logprobs(logits, ids, banned=None, mask=None):
    """The plain formula ``token_logprobs`` used before chunking (callers divided by the
    temperature first): the reference for values and gradients."""
    logits = logits.float()
    if banned:
        logits = logits.index_fill(-1, torch.tensor(banned, device=logits.device), float("-inf"))
    logp_all = torch.log_softmax(logits, dim=-1)
    logp = logp_all.gather(-1, ids.unsqueeze(-1)).squeeze(-1)
    p = logp_all.exp()
    entropy = -torch.where(p > 0, p * logp_all, torch.zeros_like(p)).sum(-1)
    if mask is not None:
        logp = torch.where(mask.bool(), logp, torch.zeros_like(logp))
    return logp, entropy


def batch(dead_row: bool = True, banned_sample: bool = True):
    """Random logits ``[N, T + 1, V]`` (the caller slices ``[:, :T]``, as the model path does), ids,
    and a mask; padding holds a banned id; optionally a real token sampled a banned id and a masked
    position whose logits are all -inf."""
    gen = torch.Generator().manual_seed(0)
    logits = 3 * torch.randn(N, T + 1, V, generator=gen)
    ids = torch.randint(0, V, (N, T), generator=gen)
    ids[ids == BANNED[0]] = 0
    ids[ids == BANNED[1]] = 0
    mask = torch.ones(N, T, dtype=torch.long)
    mask[1, 7:] = 0
    ids[1, 8] = BANNED[1]  # padding holding a banned id
    if banned_sample:
        ids[0, 2] = BANNED[0]  # sampled although banned: -inf, visible
    if dead_row:
        logits[2, 5] = float("-inf")
        mask[2, 5] = 0
    return logits, ids, mask


@pytest.mark.parametrize("temperature", [1.0, 0.7])
@pytest.mark.parametrize("rows", [3, None], ids=["3-row chunks", "default chunks"])
def test_values_equal_the_previous_formula(temperature, rows, monkeypatch):
    if rows is not None:
        monkeypatch.setattr(chunked_logits, "CHUNK_BYTES", rows * V * 4)
    logits, ids, mask = batch()
    logp, entropy = token_logprobs(logits[:, :T], ids, BANNED, mask, temperature)
    ref_logp, ref_entropy = previous_token_logprobs(logits[:, :T] / temperature, ids, BANNED, mask)
    assert logp.dtype == entropy.dtype == torch.float32
    assert logp[0, 2].item() == float("-inf")
    assert logp[1, 8].item() == 0.0 and logp[2, 5].item() == 0.0 and entropy[2, 5].item() == 0.0
    torch.testing.assert_close(logp, ref_logp, atol=1e-6, rtol=0)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-6, rtol=0)


def test_bf16_logits_give_the_previous_formulas_float32_values():
    logits, ids, mask = batch()
    logits = logits[:, :T].bfloat16()
    logp, entropy = token_logprobs(logits, ids, BANNED, mask)
    ref_logp, ref_entropy = previous_token_logprobs(logits, ids, BANNED, mask)
    torch.testing.assert_close(logp, ref_logp, atol=1e-6, rtol=0)
    torch.testing.assert_close(entropy, ref_entropy, atol=1e-6, rtol=0)


def test_gradient_passes_gradcheck_in_float64():
    logits, ids, mask = batch(banned_sample=False)
    logits = logits[:, :T].double().requires_grad_(True)

    def both(z):
        logp, entropy = logprobs_and_entropy(z, ids, banned=BANNED, temperature=0.7, rows=3)
        return torch.where(mask.bool(), logp, 0.0), entropy

    assert torch.autograd.gradcheck(both, (logits,))


def plain_entropy(logits, banned):
    """The entropy formula with the -inf entries selected away before multiplying: the previous
    formula multiplied first, so its gradient is 0 * -inf = NaN wherever an id is banned."""
    logits = logits.index_fill(-1, torch.tensor(banned), float("-inf"))
    logp_all = torch.log_softmax(logits, dim=-1)
    p = logp_all.exp()
    return -(p * torch.where(p > 0, logp_all, torch.zeros_like(p))).sum(-1)


def test_gradient_equals_autograd_of_the_plain_formula():
    # no all -inf row here: the previous formula's log-softmax backward gives such a row NaN
    logits, ids, mask = batch(dead_row=False, banned_sample=False)
    weights = torch.randn(2, N, T, generator=torch.Generator().manual_seed(1))
    grads = []
    for formula in ("chunked", "plain"):
        z = logits[:, :T].clone().requires_grad_(True)
        if formula == "chunked":
            logp, entropy = logprobs_and_entropy(z, ids, banned=BANNED, temperature=0.7, rows=3)
            logp = torch.where(mask.bool(), logp, 0.0)
        else:
            logp, _ = previous_token_logprobs(z / 0.7, ids, BANNED, mask)
            entropy = plain_entropy(z / 0.7, BANNED)
        ((weights[0] * logp).sum() + (weights[1] * entropy).sum()).backward()
        grads.append(z.grad)
    torch.testing.assert_close(grads[0], grads[1], atol=1e-6, rtol=0)
    assert grads[0][:, :, BANNED].abs().max() == 0  # constants: no gradient


def test_all_inf_rows_get_a_zero_gradient_and_the_entropy_none():
    logits, ids, mask = batch()
    z = logits[:, :T].clone().requires_grad_(True)
    logp, entropy = token_logprobs(z, ids, BANNED, mask)
    assert logp.requires_grad and not entropy.requires_grad  # the entropy is only a metric
    torch.where(mask.bool() & torch.isfinite(logp), logp, 0.0).sum().backward()
    assert torch.isfinite(z.grad).all()
    assert z.grad[2, 5].abs().max() == 0 and z.grad[1, 7:].abs().max() == 0


class Allocations(TorchDispatchMode):
    """(dtype, bytes) of every tensor storage an op creates: a view or an in-place result shares
    one of its inputs' storages and is not counted."""

    def __init__(self):
        super().__init__()
        self.created: list[tuple[torch.dtype, int]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        inputs = {t.untyped_storage().data_ptr() for t in tensors}
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in inputs:
                self.created.append((t.dtype, t.untyped_storage().nbytes()))
        return out


def test_no_float32_tensor_larger_than_one_chunk(monkeypatch):
    rows = 4
    monkeypatch.setattr(chunked_logits, "CHUNK_BYTES", rows * V * 4)
    logits, ids, mask = batch()
    logits = logits.bfloat16().requires_grad_(True)  # the model's dtype in training
    ids, mask = torch.cat([ids, ids[:, :1]], 1), torch.cat([mask, mask[:, :1]], 1)
    full_float32 = logits.numel() * 4
    with Allocations() as seen:
        logp, entropy = token_logprobs(logits, ids, BANNED, mask, 0.7)
        torch.where(mask.bool() & torch.isfinite(logp), logp, 0.0).sum().backward()
    largest_float32 = max(size for dtype, size in seen.created if dtype == torch.float32)
    assert largest_float32 <= rows * V * 4 < full_float32
    # the one tensor of the logits' size: their gradient, in their dtype
    assert [c for c in seen.created if c[1] > rows * V * 4] == [(torch.bfloat16, logits.numel() * 2)]
    with Allocations() as previous:  # the measurement sees full copies where there are some
        previous_token_logprobs(logits / 0.7, ids, BANNED, mask)
    assert max(size for dtype, size in previous.created if dtype == torch.float32) == full_float32


def test_logprobs_at_several_ids_equal_the_plain_formula_with_its_gradient():
    """A student's log-probs of a teacher's top-k ids: values and the chunked backward against
    autograd of the plain log-softmax, banned ids and an all -inf row included."""
    from easyvideor1.models.chunked_logits import logprobs_at, top_logprobs

    logits, _, _ = batch(banned_sample=False)
    logits = logits[:, :T].double().requires_grad_(True)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(20, V, (N, T, 3), generator=gen)  # no banned id among them
    plain_all = torch.log_softmax(logits.index_fill(-1, torch.tensor(BANNED), float("-inf")) / 0.7, -1)
    live = ~torch.isneginf(logits.detach().amax(-1, keepdim=True))
    plain = torch.where(live, plain_all.gather(-1, ids), 0.0)
    ours = logprobs_at(logits, ids, banned=BANNED, temperature=0.7, rows=4)
    torch.testing.assert_close(ours, plain)
    weights = torch.randn(ours.shape, generator=gen, dtype=torch.float64)
    (g_ours,) = torch.autograd.grad((ours * weights).sum(), logits)
    (g_plain,) = torch.autograd.grad((torch.where(live, plain, 0.0) * weights).sum(), logits)
    torch.testing.assert_close(g_ours, torch.nan_to_num(g_plain, nan=0.0))
    top_ids, top = top_logprobs(logits.detach(), 5, banned=BANNED, temperature=0.7, rows=4)
    expected = plain_all.detach().topk(5, -1)
    assert torch.equal(top_ids[live.squeeze(-1)], expected.indices[live.squeeze(-1)])
    torch.testing.assert_close(top[live.squeeze(-1)], expected.values[live.squeeze(-1)])
    assert not set(top_ids.flatten().tolist()) & set(BANNED)
    assert float(top[~live.squeeze(-1)].abs().sum()) == 0.0
