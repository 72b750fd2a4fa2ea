"""How a micro-batch's rows split into forward/backward chunks (`train.rows_per_forward`, `train.forward_chunks`).

A chunk pads every completion to its longest and, in the prompt-sharing layout, every unique prompt to
its longest, so it computes

    positions(chunk) = n · C_max + U · P_max        (shared prompts; U unique prompts of P_max tokens)
                     = n · (P_max + C_max)          (the packed layout)

token positions, each one forward and one backward of the whole model, whether it holds a token or
padding. Rows are sorted by completion length first, so that similar lengths share a chunk.

`consecutive` cuts the sorted rows every `rows_per_forward` rows. With long-tailed answers (a few reach
`max_new_tokens`, most stop far sooner) its last chunk pads five short answers to the one long one:
in the quick start a chunk of six rows computed 3,066 completion positions for 1,069 tokens.

`fewest_positions` takes the cut of the sorted rows into chunks of at most `rows_per_forward` rows that
minimises sum over chunks of (positions(chunk) + CHUNK_COST): a shortest path over the cut points
(dynamic programming, O(n · rows_per_forward²)), exact for contiguous chunks of a sorted list.
CHUNK_COST, the fixed cost of a forward/backward call in positions, keeps it from cutting where
little padding is saved.

The loss is a sum of per-sequence terms with weights fixed on the whole batch, so any chunking gives
the same update up to floating-point rounding (tests/unit/test_grpo_engine.py); it changes time and
memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import get_args

from components.config import TrainConfig
from components.contracts.rollouts import Rollout

WAYS = get_args(TrainConfig.model_fields["forward_chunks"].annotation)  # the config's values, defined there

# An fp32 LoRA forward/backward of one chunk costs ≈ 4.5 ms a position on the 2-core benchmark CPU
# and ≈ 0.1–0.25 s whatever its size (a 1-row chunk of 10 positions took 284 ms;
# results/speed/forward_chunks.txt); 64 positions is ≈ 0.29 s, so a cut must save at least that much padding.
CHUNK_COST = 64


def chunk_positions(rows: Sequence[Rollout], share_prompts: bool) -> int:
    """Token positions a chunk of `rows` computes (padding included), as in the module's formula."""
    completion = max(len(r.completion_ids) for r in rows)
    if not share_prompts:
        return len(rows) * (max(len(r.prompt_ids) for r in rows) + completion)
    prompts = {r.prompt_ids for r in rows}
    return len(rows) * completion + len(prompts) * max(len(p) for p in prompts)


def forward_chunks(
    rollouts: Sequence[Rollout], positions: list[int], rows_per_forward: int, how: str = "consecutive", share_prompts: bool = True
) -> list[list[int]]:
    """`positions` (indices into `rollouts`) as chunks of at most `rows_per_forward` rows (0: one chunk),
    rows sorted by completion length; `how`: consecutive | fewest_positions (the module docstring)."""
    if how not in WAYS:
        raise ValueError(f"train.forward_chunks: unknown {how!r} ({' | '.join(WAYS)})")
    if rows_per_forward <= 0 or len(positions) <= 1 or (how == "consecutive" and len(positions) <= rows_per_forward):
        return [positions]
    ordered = sorted(positions, key=lambda i: (len(rollouts[i].completion_ids), i))
    if how == "consecutive":
        return [ordered[i : i + rows_per_forward] for i in range(0, len(ordered), rows_per_forward)]
    # best[j]: the least cost of the first j sorted rows; cut[j]: where its last chunk starts
    best, cut = [0] + [None] * len(ordered), [0] * (len(ordered) + 1)
    for j in range(1, len(ordered) + 1):
        for k in range(max(0, j - rows_per_forward), j):  # ascending: ties keep the larger chunk
            cost = best[k] + chunk_positions([rollouts[i] for i in ordered[k:j]], share_prompts) + CHUNK_COST
            if best[j] is None or cost < best[j]:
                best[j], cut[j] = cost, k
    chunks, j = [], len(ordered)
    while j > 0:
        chunks.append(ordered[cut[j] : j])
        j = cut[j]
    return chunks[::-1]
