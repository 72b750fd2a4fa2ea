"""Response entropy: the information content of one response, used by the consistency rewards.

Information-consistent GRPO (Prabhune, Padmanabhan & Dutta 2025, arXiv:2512.12858) scores a
response by its entropy ("entropy-based helpfulness") and a group by how little that entropy moves
between equivalent prompt variants ("stability"). groupwise's exact definition:

    words(o)  = lower-cased alphanumeric word tokens of the response o   (regex [a-z0-9']+)
    p_w       = count_w / |words(o)|
    H(o)      = -sum_w p_w log p_w                                        (nats; 0 if empty)
    H_norm(o) = min(H(o) / log W_max, 1)                                  (W_max: params.reward.entropy_max_words)

H(o) <= log |words(o)|, so H_norm grows with both length and lexical variety, saturating at a
response of W_max distinct words; an empty or one-word answer scores 0.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache

_WORD = re.compile(r"[a-z0-9']+")


def words(text: str) -> list[str]:
    """Lower-cased alphanumeric word tokens of `text`."""
    return _WORD.findall(text.lower())


@lru_cache(maxsize=1 << 16)
def response_entropy(text: str) -> float:
    """H(o) = -sum_w p_w log p_w over the word distribution of the response (nats).

    Cached: evaluation asks for the same response's entropy for several metrics.
    """
    tokens = words(text)
    if not tokens:
        return 0.0
    n = len(tokens)
    return -sum((c / n) * math.log(c / n) for c in Counter(tokens).values()) + 0.0


def normalized_entropy(text: str, max_words: int) -> float:
    """H_norm(o) = min(H(o) / log W_max, 1), in [0, 1]."""
    if max_words < 2:
        raise ValueError(f"max_words must be >= 2, got {max_words}")
    return min(response_entropy(text) / math.log(max_words), 1.0)
