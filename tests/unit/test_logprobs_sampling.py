"""Log-prob alignment of the packed training batch, and EOS handling of the sampler (tiny model)."""

import pytest
import torch

from components.generation.sampling import SamplingConfig, TransformersEngine
from components.grpo.logprobs import completion_logprobs, pack
from components.grpo.types import Rollout
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
