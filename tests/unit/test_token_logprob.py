"""The blocked sampled-token log-prob (`logprobs.token_stats`) against autograd on the plain computation."""

import pytest
import torch

import components.models.logprobs as logprobs
from components.models.logprobs import token_stats


def plain(logits, targets, temperature, with_entropy):
    """The computation autograd differentiates: z = logits.float() / T, gather - logsumexp."""
    z = logits.float() / temperature
    log_z = torch.logsumexp(z, dim=-1)
    logp = z.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - log_z
    entropy = None
    if with_entropy:
        with torch.no_grad():
            entropy = log_z - (torch.exp(z - log_z.unsqueeze(-1)) * z).sum(-1)
    return logp, entropy


def run(fn, source, targets, weights, temperature, with_entropy):
    logits = source.clone().requires_grad_(True)
    logp, entropy = fn(logits[:, :-1], targets, temperature, with_entropy)  # a non-contiguous view, as in training
    (logp * weights).sum().backward()
    return logp.detach(), entropy, logits.grad


def blocked(logits, targets, temperature, with_entropy):
    stats = token_stats(logits, targets, temperature, with_entropy)
    return stats.logp, stats.entropy


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("block_bytes", [4 * 300 * 3, 2 << 20])  # three positions a block; the whole row in one
@pytest.mark.parametrize("with_entropy", [True, False])
def test_equals_autograd_to_the_bit(monkeypatch, dtype, block_bytes, with_entropy):
    monkeypatch.setitem(logprobs._BLOCK_BYTES, "cpu", block_bytes)
    gen = torch.Generator().manual_seed(0)
    source = (torch.randn(3, 12, 300, generator=gen) * 4).to(dtype)
    targets = torch.randint(0, 300, (3, 11), generator=gen)
    weights = torch.randn(3, 11, generator=gen)
    expected = run(plain, source, targets, weights, 0.7, with_entropy)
    got = run(blocked, source, targets, weights, 0.7, with_entropy)
    assert torch.equal(got[0], expected[0])
    assert torch.equal(got[2], expected[2]) and got[2].dtype == dtype
    if with_entropy:
        assert torch.equal(got[1], expected[1]) and not got[1].requires_grad
    else:
        assert got[1] is None


def test_keeps_no_fp32_copy_of_the_logits_for_the_backward():
    """Autograd on the plain computation keeps fp32 (B, C, V) tensors for its backward; the blocked
    one keeps the bf16 logits themselves and a (B, C) log-normaliser."""
    logits = torch.randn(2, 50, 1000).bfloat16().requires_grad_(True)
    targets = torch.randint(0, 1000, (2, 50))

    def saved_bytes(fn) -> int:
        seen: dict[int, int] = {}

        def pack(t):
            seen[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            fn(logits, targets, 0.7, True)
        return sum(seen.values())

    logits_bytes = logits.untyped_storage().nbytes()
    assert saved_bytes(plain) >= 2 * logits_bytes  # at least one fp32 copy
    assert saved_bytes(blocked) <= logits_bytes + 2 * 50 * (4 + 8)
