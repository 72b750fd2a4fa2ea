"""How a micro-batch's rows split into forward/backward chunks: `consecutive` cuts every
rows_per_forward sorted rows, `fewest_positions` the cut that computes the fewest padded positions."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from components.config import Params
from components.config.migrations import with_former_defaults
from components.contracts.rollouts import Rollout
from components.grpo.forward_chunks import CHUNK_COST, chunk_positions, forward_chunks

PROMPT = tuple(range(90))


def rows(lengths, prompts=None) -> list[Rollout]:
    prompts = prompts or [PROMPT] * len(lengths)
    return [Rollout(0, "g", f"v{i}", "", "", p, tuple(range(n)), False) for i, (n, p) in enumerate(zip(lengths, prompts))]


def cost(rollouts, chunks, share_prompts=True) -> int:
    return sum(chunk_positions([rollouts[i] for i in c], share_prompts) + CHUNK_COST for c in chunks)


def test_one_long_answer_gets_its_own_chunk_instead_of_padding_five_short_ones():
    """The quick start's case: one answer at max_new_tokens among short ones of the same prompt."""
    rs = rows([512, 40, 55, 60, 70, 80])
    assert forward_chunks(rs, list(range(6)), 6, "consecutive") == [list(range(6))]  # one chunk: all six rows padded to 512
    fewest = forward_chunks(rs, list(range(6)), 6, "fewest_positions")
    assert fewest == [[1, 2, 3, 4, 5], [0]]
    # 6 x 512 + 90 positions against 5 x 80 + 90 and 512 + 90
    assert chunk_positions(rs, True) == 6 * 512 + 90
    assert cost(rs, fewest) == 5 * 80 + 90 + 512 + 90 + 2 * CHUNK_COST


def test_similar_lengths_stay_in_one_chunk():
    """A cut that saves less padding than a chunk's fixed cost is not taken."""
    rs = rows([60, 62, 64, 66, 68, 70])
    assert forward_chunks(rs, list(range(6)), 6, "fewest_positions") == [list(range(6))]


def test_prompts_count_once_a_chunk_in_the_shared_layout_and_per_row_in_the_packed_one():
    a, b = tuple(range(100)), tuple(range(40))
    rs = rows([10, 20, 30], [a, a, b])
    assert chunk_positions(rs, share_prompts=True) == 3 * 30 + 2 * 100
    assert chunk_positions(rs, share_prompts=False) == 3 * (100 + 30)


@pytest.mark.parametrize("share_prompts", [True, False])
def test_the_cut_is_the_cheapest_contiguous_cut_of_the_sorted_rows(share_prompts):
    """Against every contiguous cut of the length-sorted rows (brute force), on random batches with
    long-tailed lengths and several prompts; every row once, in sorted order, at most R a chunk."""
    rnd = random.Random(0)
    prompts = [tuple(range(rnd.randrange(5, 200))) for _ in range(3)]
    for _ in range(60):
        n, limit = rnd.randrange(1, 9), rnd.randrange(1, 7)
        lengths = [rnd.choice([rnd.randrange(1, 120), 512]) for _ in range(n)]
        rs = rows(lengths, [rnd.choice(prompts) for _ in range(n)])
        chunks = forward_chunks(rs, list(range(n)), limit, "fewest_positions", share_prompts)
        ordered = sorted(range(n), key=lambda i: (lengths[i], i))
        assert [i for c in chunks for i in c] == ordered
        assert all(1 <= len(c) <= limit for c in chunks)
        cuts = [[ordered[a:b] for a, b in zip((0, *ends), (*ends, n))] for k in range(n) for ends in itertools.combinations(range(1, n), k)]
        feasible = [c for c in cuts if all(len(chunk) <= limit for chunk in c)]
        assert cost(rs, chunks, share_prompts) == min(cost(rs, c, share_prompts) for c in feasible)
        consecutive = forward_chunks(rs, list(range(n)), limit, "consecutive", share_prompts)
        assert cost(rs, chunks, share_prompts) <= cost(rs, consecutive, share_prompts)


def test_no_limit_is_one_chunk_and_an_unknown_way_is_refused():
    rs = rows([512, 10, 20])
    assert forward_chunks(rs, [0, 1, 2], 0, "fewest_positions") == [[0, 1, 2]]
    with pytest.raises(ValueError, match="forward_chunks"):
        forward_chunks(rs, [0, 1, 2], 2, "shortest")
    with pytest.raises(ValueError, match=re.escape("(consecutive | fewest_positions)")):
        forward_chunks(rs, [0], 0, "shortest")  # refused before any shortcut, whatever the rows


def test_the_default_is_fewest_positions_and_saved_work_keeps_consecutive():
    assert Params().train.forward_chunks == "fewest_positions"
    assert with_former_defaults({"train": {"steps": 3}})["train"]["forward_chunks"] == "consecutive"
    assert with_former_defaults({"train": {"forward_chunks": "fewest_positions"}})["train"]["forward_chunks"] == "fewest_positions"
