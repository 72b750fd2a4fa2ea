"""Log-prob alignment of the packed training batch, and EOS handling of the sampler (tiny model)."""

import math

import pytest
import torch

from components.contracts.rollouts import Rollout
from components.generation.sampling import SamplingConfig, TransformersEngine, sample_next
from components.models.logprobs import completion_logprobs, pack
from components.models.provision import load_base_model


@pytest.fixture(scope="module")
def model_and_tokenizer(tiny_model_dir):
    return load_base_model(tiny_model_dir)


def naive_logprobs(model, prompt_ids, completion_ids, temperature):
    ids = torch.tensor([list(prompt_ids) + list(completion_ids)])
    logits = model(input_ids=ids).logits[0].float() / temperature
    logp = torch.log_softmax(logits, dim=-1)
    start = len(prompt_ids) - 1
    return torch.stack([logp[start + t, tok] for t, tok in enumerate(completion_ids)])


def test_packed_logprobs_match_one_sequence_at_a_time(model_and_tokenizer):
    model, tok = model_and_tokenizer
    rollouts = [
        Rollout(0, "g", "a", "p", "c", (5, 6, 7, 8, 9), (10, 11, 2), False),
        Rollout(0, "g", "b", "p", "c", (5, 6), (12, 13, 14, 15, 16, 17), True),
        Rollout(1, "h", "a", "p", "c", (20, 21, 22), (23,), False),
    ]
    packed = pack(rollouts, tok.pad_token_id)
    with torch.no_grad():
        got = completion_logprobs(model, packed, temperature=0.7).logp
        for i, r in enumerate(rollouts):
            expected = naive_logprobs(model, r.prompt_ids, r.completion_ids, 0.7)
            n = len(r.completion_ids)
            assert torch.allclose(got[i, :n], expected, atol=1e-4)
            assert packed.completion_mask[i].sum() == n


def test_sampler_stops_at_eos_and_flags_truncation(model_and_tokenizer):
    model, tok = model_and_tokenizer
    engine = TransformersEngine(model, tok, batch_size=8, show_progress=False)
    cfg = SamplingConfig(n=4, max_new_tokens=6, temperature=1.0, top_p=1.0, seed=3)
    outs = engine.generate(["Name a colour.", "What should I invest in?"], cfg)
    assert [len(o) for o in outs] == [4, 4]
    for per_prompt in outs:
        for c in per_prompt:
            assert tok.eos_token_id not in c.completion_ids[:-1]
            if c.truncated:
                assert len(c.completion_ids) == 6 and c.completion_ids[-1] != tok.eos_token_id
            else:
                assert c.completion_ids[-1] == tok.eos_token_id
            assert c.text == tok.decode(c.completion_ids, skip_special_tokens=True).strip()
    again = engine.generate(["Name a colour.", "What should I invest in?"], cfg)
    assert [[c.completion_ids for c in o] for o in outs] == [[c.completion_ids for c in o] for o in again]


@pytest.fixture
def eos_prone(model_and_tokenizer):
    """The tiny model with +6 on the EOS logit (a forward hook), so rows finish at different steps."""
    model, tok = model_and_tokenizer
    eos = tok.eos_token_id

    def boost(module, inputs, output):
        output = output.clone()
        output[..., eos] += 6.0
        return output

    handle = model.lm_head.register_forward_hook(boost)
    yield model, tok
    handle.remove()


def test_sampler_logprobs_match_teacher_forcing_when_rows_finish_early(eos_prone):
    """Dropping finished rows from the batch and the KV cache must not disturb the others."""
    model, tok = eos_prone
    engine = TransformersEngine(model, tok, batch_size=12, show_progress=False)
    cfg = SamplingConfig(n=6, max_new_tokens=10, temperature=0.8, top_p=0.95, seed=11)
    outs = engine.generate(["Name a colour.", "What should I invest in? Please answer briefly."], cfg)
    lengths = {len(c.completion_ids) for o in outs for c in o}
    assert len(lengths) > 2, "the EOS boost should make completions end at different steps"
    rollouts = [Rollout(i, "g", "v", "p", c.text, c.prompt_ids, c.completion_ids, c.truncated) for i, o in enumerate(outs) for c in o]
    with torch.no_grad():
        forced = completion_logprobs(model, pack(rollouts, tok.pad_token_id), temperature=0.8).logp
    for row, c in enumerate(c for o in outs for c in o):
        assert len(c.logprobs) == len(c.completion_ids)
        assert torch.allclose(forced[row, : len(c.logprobs)], torch.tensor(c.logprobs), atol=1e-4)


def test_near_zero_top_p_is_greedy_decoding_like_generate(model_and_tokenizer):
    model, tok = model_and_tokenizer
    engine = TransformersEngine(model, tok, batch_size=4, show_progress=False)
    prompts = ["Name a colour.", "What should I invest in? Please answer briefly."]
    cfg = SamplingConfig(n=2, max_new_tokens=8, temperature=1.0, top_p=1e-9, seed=0)
    ours = engine.generate(prompts, cfg)
    from components.generation.sampling import chat_prompt

    for prompt, samples in zip(prompts, ours):
        enc = tok(chat_prompt(tok, prompt), return_tensors="pt", add_special_tokens=False)
        with torch.no_grad():
            greedy = model.generate(**enc, do_sample=False, max_new_tokens=8, pad_token_id=tok.pad_token_id)
        expected = tuple(greedy[0, enc["input_ids"].shape[1] :].tolist())
        assert all(s.completion_ids == expected[: len(s.completion_ids)] for s in samples)
        assert samples[0].completion_ids == samples[1].completion_ids


def test_shared_prompt_forward_matches_packed_forward_and_gradients(model_and_tokenizer, tiny_model_dir):
    from components.config import LoraConfig
    from components.models.logprobs import pack_shared, shared_prompt_logprobs
    from components.models.lora import attach_lora

    base, tok = load_base_model(tiny_model_dir)
    torch.manual_seed(0)
    model = attach_lora(base, LoraConfig())
    for name, p in model.named_parameters():
        if "lora_B" in name:
            p.data.normal_(0, 0.05)  # a non-trivial adapter, so prompt keys/values get gradients too
    g = torch.Generator().manual_seed(1)
    rollouts = []
    for q, text in enumerate(["Name a colour please.", "What is a capital city in Europe? Answer briefly."]):
        ids = tuple(tok(text)["input_ids"])
        for _ in range(3):
            n = int(torch.randint(1, 12, (1,), generator=g))
            rollouts.append(Rollout(q, "g", "v", text, "", ids, tuple(torch.randint(0, 1000, (n,), generator=g).tolist()), False))
    packed, shared = pack(rollouts, tok.pad_token_id), pack_shared(rollouts, tok.pad_token_id)
    assert shared.prompt_ids.shape[0] == 2  # two unique prompts for six rows
    a = completion_logprobs(model, packed, 0.7, with_entropy=True)
    b = shared_prompt_logprobs(model, shared, 0.7, with_entropy=True)
    m = packed.completion_mask
    assert torch.equal(m, shared.completion_mask)
    assert ((a.logp - b.logp).abs() * m).max() < 1e-5
    assert ((a.entropy - b.entropy).abs() * m).max() < 1e-5
    (a.logp * m).sum().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.requires_grad}
    model.zero_grad()
    (b.logp * m).sum().backward()
    for n, p in model.named_parameters():
        if p.requires_grad:
            assert torch.allclose(p.grad, grads[n], atol=1e-4), n
    assert any(g.abs().sum() > 0 for n, g in grads.items() if "lora_A" in n)


def test_temperature_zero_is_argmax_with_its_log_softmax_logprob():
    logits = torch.tensor([[0.0, 2.0, 1.0, -1.0], [3.0, 0.0, 0.0, 0.0]])
    # row 0: argmax 1, log p = 2 − ln(e⁰ + e² + e¹ + e⁻¹); row 1: argmax 0, log p = 3 − ln(e³ + 3)
    expected = [2 - math.log(1 + math.e**2 + math.e + math.exp(-1)), 3 - math.log(math.e**3 + 3)]
    results = [sample_next(logits, 0.0, top_p, torch.Generator().manual_seed(seed)) for seed, top_p in ((0, 1.0), (1, 1.0), (12345, 0.5))]
    for chosen, logp in results:  # the same whatever the generator's seed or top_p
        assert chosen.tolist() == [1, 0]
        assert logp.tolist() == pytest.approx(expected, abs=1e-6)
    # the log-prob is under softmax(logits), not a distribution sharpened to one token (log p = 0)
    assert all(lp < 0 for lp in results[0][1].tolist())


def test_temperature_zero_engine_decodes_like_greedy_generate(model_and_tokenizer):
    from components.generation.sampling import chat_prompt

    model, tok = model_and_tokenizer
    engine = TransformersEngine(model, tok, batch_size=4, show_progress=False)
    prompt = "Name a colour."
    ours = engine.generate([prompt], SamplingConfig(n=2, max_new_tokens=8, temperature=0.0, top_p=1.0, seed=0))[0]
    enc = tok(chat_prompt(tok, prompt), return_tensors="pt", add_special_tokens=False)
    with torch.no_grad():
        greedy = model.generate(**enc, do_sample=False, max_new_tokens=8, pad_token_id=tok.pad_token_id)
    expected = tuple(greedy[0, enc["input_ids"].shape[1] :].tolist())
    assert all(s.completion_ids == expected[: len(s.completion_ids)] for s in ours)
    assert ours[0].completion_ids == ours[1].completion_ids and ours[0].logprobs == ours[1].logprobs
    # log-probs under softmax(logits): teacher forcing at T = 1 gives the same numbers
    rollouts = [Rollout(0, "g", "a", "p", "c", ours[0].prompt_ids, ours[0].completion_ids, ours[0].truncated)]
    with torch.no_grad():
        forced = completion_logprobs(model, pack(rollouts, tok.pad_token_id), temperature=1.0).logp
    n = len(ours[0].logprobs)
    assert torch.allclose(forced[0, :n], torch.tensor(ours[0].logprobs), atol=1e-4)
