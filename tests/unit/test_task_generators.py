"""Generated GAPO / SEED-GRPO tasks: deterministic, valid sets that their normaliser maps
onto themselves, the answer parser on hand cases, the correctness reward and the all-valid rate."""

from __future__ import annotations

from pathlib import Path

import pytest

from components.config import DataConfig, RewardConfig
from components.contracts.rollouts import Rollout
from components.data.builder import build_groups
from components.data.normalizers import get_normalizer
from components.data.task_generators import GENERATORS
from components.data.templates import TemplateError, parse_template
from components.evaluation.metrics import all_valid
from components.rewards import get_reward

ROOT = Path(__file__).resolve().parents[2]


def test_generators_are_deterministic_and_their_valid_sets_parse():
    for name in ("list_selection", "constrained_counting", "arithmetic"):
        first, again = GENERATORS.get(name)(12, 3), GENERATORS.get(name)(12, 3)
        assert first == again and len(first) == 12
        assert first != GENERATORS.get(name)(12, 4) or name == "constrained_counting"  # a seed changes lists/problems
        assert len({t["domain"] for t in first}) == 12
        for task in first:
            normalize = get_normalizer(task["normalizer"])
            assert all(normalize(v, task["valid_answers"]) == v for v in task["valid_answers"])


def test_list_selection_lists_its_valid_set_in_the_prompt():
    for task in GENERATORS.get("list_selection")(8, 0):
        assert 3 <= len(task["valid_answers"]) <= 5
        for prompt in task["phrasings"]:
            assert ", ".join(task["valid_answers"]) in prompt


def test_constrained_counting_valid_sets_are_computed():
    tasks = {t["domain"]: t for t in GENERATORS.get("constrained_counting")(26, 0)}
    assert tasks["count-odd-1-10"]["valid_answers"] == ["1", "3", "5", "7", "9"]
    assert tasks["count-prime_number-1-20"]["valid_answers"] == ["2", "3", "5", "7", "11", "13", "17", "19"]
    assert "between 1 and 10 that is odd" in tasks["count-odd-1-10"]["phrasings"][0]
    with pytest.raises(ValueError, match="only .* distinct tasks"):
        GENERATORS.get("constrained_counting")(1000, 0)


def test_arithmetic_answers_by_hand():
    for task in GENERATORS.get("arithmetic")(8, 0):
        prompt, (answer,) = task["phrasings"][0], task["valid_answers"]
        numbers = [int(w) for w in prompt.replace("?", " ").replace(".", " ").split() if w.isdigit()]
        x, y = numbers
        op = task["domain"].split("-")[1]
        assert int(answer) == {"add": x + y, "subtract": x - y, "multiply": x * y, "divide": x // y}[op]
        assert int(answer) > 0 and (op != "divide" or x % y == 0)


@pytest.mark.parametrize(
    "text, expected",
    [("8", "8"), ("3 + 5 = 8.", "8"), ("She had 3, bought 5, so 8 apples.", "8"), ("The answer is 8 (3 + 5).", "8"),
     ("#### 8", "8"), ("3 + 5 = 9", None), ("no idea", None), ("3.5 + 4.5 = 8.0", None), ("8th", None)],
)  # fmt: skip
def test_final_integer_parser(text, expected):
    assert get_normalizer("final_integer")(text, ["8"]) == expected


def test_thousands_separators_are_read():
    assert get_normalizer("final_integer")("In total 1,200 stamps.", ["1200"]) == "1200"


def test_correctness_is_validity_with_one_right_answer():
    from components.data.schema import Member, PromptGroup

    group = PromptGroup(group_id="arith-add-000", domain="arith-add-000", task="diversity", split="train",
                        members=[Member(variant_id="p0", text="Ana has 3 and buys 5. How many? Answer with just the number.")],
                        valid_answers=["8"], answer_normalizer="final_integer")  # fmt: skip
    reward = get_reward("correctness")
    rollouts = [Rollout(0, group.group_id, "p0", "q", t, (1,), (2,), False) for t in ("3 + 5 = 8", "It is 9.", "8", "")]
    assert [reward.fn(r, group, RewardConfig()) for r in rollouts] == [1.0, 0.0, 1.0, 0.0]
    many = group.model_copy(update={"valid_answers": ["8", "9"]})
    with pytest.raises(ValueError, match="exactly one valid answer"):
        reward.fn(rollouts[0], many, RewardConfig())


def test_all_valid_by_hand():
    assert all_valid(["red", "green", "blue", None], ["red", "green", "blue"]) == 1.0
    assert all_valid(["red", "red", "green"], ["red", "green", "blue"]) == 0.0


def test_the_gapo_templates_build_into_split_groups():
    groups = build_groups(ROOT / "data" / "templates_gapo", DataConfig(), seed=0)
    kinds = {prefix: [g for g in groups if g.domain.startswith(prefix)] for prefix in ("list-", "count-", "arith-")}
    assert {k: len(v) for k, v in kinds.items()} == {"list-": 800, "count-": 480, "arith-": 360}  # groups = phrasings
    # the consistency templates are linked in (an evaluation needs held-out consistency groups)
    assert {g.domain for g in groups if g.task == "consistency"} == {"investment", "job"}
    for prefix, gs in kinds.items():
        splits = {g.domain: g.split for g in gs}
        assert set(splits.values()) == {"train", "heldout"}, prefix  # every setting has both
        for g in gs:  # split by task: all phrasings of a task share it
            assert g.split == splits[g.domain]


def test_the_gapo_profile_holds_out_enough_tasks_per_family_for_a_powered_study():
    """At the project's seed and held-out fraction: >= 100 list, >= 60 counting, >= 100 arithmetic tasks held
    out (whole tasks: every phrasing in one split), none of them a train task's prompt or valid set."""
    from components.config import load_params

    params = load_params(ROOT / "params.yaml", "gapo")
    groups = [g for g in build_groups(params.paths.templates, params.data, params.seed) if g.task == "diversity"]
    heldout = {g.domain for g in groups if g.split == "heldout"}
    counts = {fam: sum(d.startswith(f"{fam}-") for d in heldout) for fam in ("list", "count", "arith")}
    assert counts == {"list": 125, "count": 69, "arith": 106}  # data/templates_gapo/tasks.yaml states these
    assert counts["list"] >= 100 and counts["count"] >= 60 and counts["arith"] >= 100
    train = [g for g in groups if g.split == "train"]
    assert not {g.members[0].text for g in train} & {g.members[0].text for g in groups if g.split == "heldout"}
    valid_sets = {(g.domain.split("-")[0], frozenset(g.valid_answers)) for g in train}
    assert not any((g.domain.split("-")[0], frozenset(g.valid_answers)) in valid_sets
                   for g in groups if g.split == "heldout" and not g.domain.startswith("arith-"))  # fmt: skip


def test_lists_and_counting_tasks_have_distinct_valid_sets_and_keep_their_first_ones():
    """No list is another list reordered and no counting task admits the same numbers as another, so a
    held-out task is never a train task in other words; the earlier design's first tasks are unchanged."""
    from components.data.task_generators import constrained_counting, list_selection

    lists, counts = list_selection(400, 1), constrained_counting(358, 1)
    assert len({frozenset(t["valid_answers"]) for t in lists}) == 400
    assert len({tuple(t["valid_answers"]) for t in counts}) == 358
    assert lists[:40] == list_selection(40, 1) and counts[:24] == constrained_counting(24, 1)
    assert lists[0]["domain"] == "list-animal-000" and counts[0]["domain"] == "count-even-1-20"
    with pytest.raises(ValueError, match="only 358 distinct tasks"):
        constrained_counting(359, 1)


def test_a_template_with_an_unknown_generator_names_it():
    with pytest.raises(TemplateError, match=r"key .generate\[0\].generator.: unknown .lists."):
        parse_template({"task": "diversity", "generate": [{"generator": "lists", "count": 2}]}, "t.yaml")
    with pytest.raises(TemplateError, match="no tasks written and none generated"):
        parse_template({"task": "diversity"}, "t.yaml")


def test_generated_prompts_are_distinct_so_none_lands_in_both_splits():
    from components.data.task_generators import GENERATORS

    for name, count in (("arithmetic", 400), ("list_selection", 80), ("constrained_counting", 24)):
        texts = [p for task in GENERATORS.get(name)(count, 1) for p in task["phrasings"]]
        assert len(texts) == len(set(texts)), name


def test_counting_reaches_hundreds_of_tasks_and_keeps_its_first_ones():
    """Enough distinct counting tasks for a powered study (>= 60 held out at a 0.3 split); a count the
    first ranges and constraints cover gives the same tasks as before the others were added."""
    from components.data.task_generators import CONSTRAINTS, MORE_CONSTRAINTS, RANGES, constrained_counting

    first, many = constrained_counting(26, 1), constrained_counting(250, 1)
    assert many[:26] == first
    assert all(tuple(map(int, t["domain"].rsplit("-", 2)[1:])) in RANGES for t in first)
    assert len({t["domain"] for t in many}) == 250
    for task in many:
        lo, hi = map(int, task["domain"].rsplit("-", 2)[1:])
        name = next(n for n in MORE_CONSTRAINTS if task["phrasings"][0].endswith(f"is {n}. Answer with just the number."))
        assert task["valid_answers"] == [str(n) for n in range(lo, hi + 1) if MORE_CONSTRAINTS[name](n)]
        assert 2 <= len(task["valid_answers"]) <= 12
    assert set(CONSTRAINTS) < set(MORE_CONSTRAINTS)
