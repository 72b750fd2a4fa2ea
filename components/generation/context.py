"""Generation must fit the model: the longest chat prompt plus `max_new_tokens` within the model's
context window (and within an engine's `max_model_len`), checked before anything is generated.

`components.config` refuses the same at load against the engines' `max_model_len`, with
`data.max_prompt_tokens` as the bound on a prompt; here the prompts are counted as the engines see
them (the chat template included) and the model's own context is known.
"""

from __future__ import annotations

from collections.abc import Iterable

from components.contracts.errors import UserError

# where transformers' configs keep the context window, by model family
_CONTEXT_KEYS = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length")


class ContextLengthError(UserError, ValueError):
    """The longest prompt plus the tokens to generate exceed the model's or the engine's context."""


def context_length(config) -> int | None:
    """The context window of a transformers model config (None: the config does not say)."""
    for key in _CONTEXT_KEYS:
        value = getattr(config, key, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def longest_prompt_tokens(tokenizer, texts: Iterable[str]) -> int:
    """Tokens of the longest user text once wrapped in the chat template (0: no texts)."""
    from components.generation.sampling import chat_prompt

    prompts = [chat_prompt(tokenizer, text) for text in set(texts)]
    if not prompts:
        return 0
    return max(len(ids) for ids in tokenizer(prompts, add_special_tokens=False)["input_ids"])


def check_fits(prompt_tokens: int, new_tokens: int, new_tokens_key: str, limit: int | None, limit_name: str) -> None:
    """Refuse when the longest prompt plus `new_tokens` exceed `limit` (None: nothing to check)."""
    if limit is not None and prompt_tokens + new_tokens > limit:
        raise ContextLengthError(
            f"{new_tokens_key} ({new_tokens}) + the longest prompt ({prompt_tokens} tokens) exceed {limit_name} "
            f"({limit} tokens): lower {new_tokens_key} to at most {max(limit - prompt_tokens, 0)}"
        )


__all__ = ["ContextLengthError", "check_fits", "context_length", "longest_prompt_tokens"]
