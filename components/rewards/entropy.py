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

That whole-answer score (`scope="answer"`, the paper's) pays for length: the consistency study's
first arm (results/consistency/report.md, `grpo-whole-answer`) quadrupled answer length until H_norm
saturated at 1 and every group's rewards were equal. `scope="window"` scores the same entropy over
a fixed number of words, as MATTR does for type-token ratios (Covington & McFall 2010):

    H_W(o)         = mean over the n - W + 1 windows of W consecutive words of H(window)   (n > W)
                   = H(o)                                                              (n <= W)
    H_norm_W(o)    = H_W(o) / log W                                                    (W = W_max)

An answer shorter than W_max words still scores less (it says less); beyond W_max words, length
alone earns nothing, only lexical variety does.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from functools import lru_cache
from typing import Literal

EntropyScope = Literal["answer", "window"]

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


@lru_cache(maxsize=1 << 16)
def windowed_entropy(text: str, window: int) -> float:
    """H_W(o): mean word entropy over the sliding windows of `window` words (H(o) if shorter).

    One pass: a window's entropy is log W - (1/W) sum_w c_w log c_w, and sliding by one word
    changes two counts.
    """
    if window < 2:
        raise ValueError(f"window must be >= 2, got {window}")
    tokens = words(text)
    if len(tokens) <= window:
        return response_entropy(text)
    counts = Counter(tokens[:window])
    clogc = math.fsum(c * math.log(c) for c in counts.values())
    total = clogc

    def _xlogx(c: int) -> float:
        return c * math.log(c) if c > 1 else 0.0

    for out, into in zip(tokens, tokens[window:]):
        if out == into:
            total += clogc
            continue
        clogc -= _xlogx(counts[out]) + _xlogx(counts[into])
        counts[out] -= 1
        counts[into] += 1
        clogc += _xlogx(counts[out]) + _xlogx(counts[into])
        total += clogc
    n_windows = len(tokens) - window + 1
    return max(math.log(window) - total / (n_windows * window), 0.0)


def normalized_entropy(text: str, max_words: int, scope: EntropyScope = "answer") -> float:
    """H_norm(o) in [0, 1]: min(H(o) / log W_max, 1) (scope answer) or H_W(o) / log W_max (window)."""
    if max_words < 2:
        raise ValueError(f"max_words must be >= 2, got {max_words}")
    if scope == "window":
        return min(windowed_entropy(text, max_words) / math.log(max_words), 1.0)
    if scope != "answer":
        raise ValueError(f"entropy scope must be 'answer' or 'window', got {scope!r}")
    return min(response_entropy(text) / math.log(max_words), 1.0)
