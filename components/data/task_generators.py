"""Generated diversity tasks for the GAPO and SEED-GRPO settings, deterministic per seed.

Each generator returns `DiversityTask`s (domain, normaliser, valid set, phrasings) that the builder
turns into groups exactly like hand-written ones, so validation, splits and rewards are shared:

- `list_selection` (GAPO's "select from a given list"): the prompt lists L options; the valid set
  is the list. A model that covers the list uniformly gets GAPO's full reward.
- `constrained_counting` (GAPO's constrained counting): "a number between lo and hi that is odd";
  the valid set is computed.
- `arithmetic` (SEED-GRPO's reasoning with a correctness reward): a one-step word problem with one
  right answer, parsed by `final_integer` (the last integer, or the one after "answer is" / "=").

Templates name them under `generate:` (data/templates_gapo/). Registered by name, like rewards.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from components.contracts.naming import NameRegistry

Generator = Callable[[int, int], list[dict]]  # (count, seed) -> DiversityTask fields
GENERATORS = NameRegistry[Generator]("task generator")
register_generator = GENERATORS.register

POOLS: dict[str, list[str]] = {
    "colour": ["red", "green", "blue", "yellow", "purple", "orange", "pink", "brown", "black", "white"],
    "fruit": ["apple", "banana", "cherry", "grape", "lemon", "mango", "peach", "pear", "plum", "kiwi"],
    "animal": ["cat", "dog", "horse", "rabbit", "tiger", "zebra", "camel", "otter", "wolf", "eagle"],
    "instrument": ["piano", "violin", "guitar", "flute", "drum", "trumpet", "cello", "harp", "oboe", "banjo"],
    "sport": ["tennis", "football", "golf", "rugby", "hockey", "cricket", "boxing", "rowing", "skiing", "judo"],
    "vegetable": ["carrot", "potato", "onion", "pea", "cabbage", "leek", "radish", "spinach", "turnip", "celery"],
    "city": ["Paris", "Tokyo", "Cairo", "Lima", "Oslo", "Rome", "Delhi", "Sydney", "Toronto", "Nairobi"],
    "metal": ["iron", "copper", "gold", "silver", "tin", "zinc", "lead", "nickel", "cobalt", "platinum"],
}
LIST_PHRASINGS = [
    "Pick one of these: {options}. Answer with just your pick.",
    "Choose one option from this list: {options}. Reply with only the option you chose.",
]


@register_generator("list_selection")
def list_selection(count: int, seed: int) -> list[dict]:
    """`count` lists of 3–5 options drawn from one pool each, in a shuffled order, no two with the same
    set of options (a held-out list is never a train list reordered)."""
    rng = random.Random(f"list_selection:{seed}")
    tasks, seen = [], set()
    pools = sorted(POOLS)
    for i in range(count):
        pool = pools[i % len(pools)]
        while True:  # distinct option sets: one valid set never lands in both splits, in any order
            options = rng.sample(POOLS[pool], rng.choice([3, 4, 5]))
            listed = ", ".join(options)
            if frozenset(options) not in seen:
                break
        seen.add(frozenset(options))
        tasks.append({
            "domain": f"list-{pool}-{i:03d}", "normalizer": "casefold_match", "valid_answers": options,
            "phrasings": [p.format(options=listed) for p in LIST_PHRASINGS],
        })  # fmt: skip
    return tasks


def _is_prime(n: int) -> bool:
    return n > 1 and all(n % d for d in range(2, int(n**0.5) + 1))


CONSTRAINTS: dict[str, Callable[[int], bool]] = {
    "odd": lambda n: n % 2 == 1,
    "even": lambda n: n % 2 == 0,
    "a multiple of 3": lambda n: n % 3 == 0,
    "a prime number": _is_prime,
    "a multiple of 4": lambda n: n % 4 == 0,
    "a perfect square": lambda n: int(n**0.5) ** 2 == n,
}
RANGES = [(1, 10), (1, 20), (10, 30), (20, 50), (1, 30)]
# further ranges and constraints, drawn only after every task of the first set: a count that the first
# set covers (26 tasks) gives the same tasks as before they existed
MORE_RANGES = [(lo, lo + w) for lo in (1, 5, 11, 21, 31, 41, 51, 61, 71, 81) for w in (9, 14, 19, 24, 29, 39) if (lo, lo + w) not in RANGES]
MORE_CONSTRAINTS: dict[str, Callable[[int], bool]] = {
    **CONSTRAINTS,
    "a multiple of 5": lambda n: n % 5 == 0,
    "a multiple of 6": lambda n: n % 6 == 0,
}
COUNT_PHRASINGS = [
    "Name a number between {lo} and {hi} that is {constraint}. Answer with just the number.",
    "Give me one whole number from {lo} to {hi} that is {constraint}. Reply with only the number.",
]


@register_generator("constrained_counting")
def constrained_counting(count: int, seed: int) -> list[dict]:
    """`count` (range, constraint) pairs with 2 to 12 valid numbers, no two with the same valid set (a held-out
    task is never a train task with a range that admits the same numbers); up to 358."""
    rng = random.Random(f"constrained_counting:{seed}")
    combos = [(lo, hi, name) for lo, hi in RANGES for name in CONSTRAINTS]
    rng.shuffle(combos)
    more = [(lo, hi, name) for lo, hi in MORE_RANGES for name in MORE_CONSTRAINTS]
    rng.shuffle(more)
    tasks, seen = [], set()
    for lo, hi, name in combos + more:
        valid = [str(n) for n in range(lo, hi + 1) if MORE_CONSTRAINTS[name](n)]
        if not 2 <= len(valid) <= 12 or tuple(valid) in seen:
            continue
        seen.add(tuple(valid))
        slug = name.replace("a ", "").replace(" ", "_")
        tasks.append({
            "domain": f"count-{slug}-{lo}-{hi}", "normalizer": "integer", "valid_answers": valid,
            "phrasings": [p.format(lo=lo, hi=hi, constraint=name) for p in COUNT_PHRASINGS],
        })  # fmt: skip
        if len(tasks) == count:
            break
    if len(tasks) < count:
        raise ValueError(f"constrained_counting: only {len(tasks)} distinct tasks exist, {count} asked for")
    return tasks


NAMES = ["Ana", "Ben", "Chen", "Dara", "Eli", "Fatima", "Goran", "Hana", "Ivo", "Jun"]
ITEMS = ["apples", "books", "marbles", "stamps", "pencils", "coins", "shells", "cards"]
PROBLEMS: list[tuple[str, str]] = [  # (operation, text); a, b drawn, the operands set per operation
    ("add", "{name} has {x} {item} and buys {y} more. How many {item} does {name} have now?"),
    ("subtract", "{name} has {x} {item} and gives {y} away. How many {item} are left?"),
    ("multiply", "{name} buys {x} boxes with {y} {item} in each box. How many {item} is that in total?"),
    ("divide", "{name} shares {x} {item} equally among {y} friends. How many {item} does each friend get?"),
]
ANSWER_FORMAT = " Answer with just the number."


def _operands(operation: str, a: int, b: int) -> tuple[int, int, int]:
    """(x, y, answer) for the operation: subtraction stays positive, division is exact."""
    if operation == "add":
        return a, b, a + b
    if operation == "subtract":
        return a + b, b, a
    if operation == "multiply":
        return a, b, a * b
    return a * b, b, a  # divide


@register_generator("arithmetic")
def arithmetic(count: int, seed: int) -> list[dict]:
    """`count` one-step word problems (add, subtract, multiply, divide evenly) with their answer."""
    rng = random.Random(f"arithmetic:{seed}")
    tasks, seen = [], set()
    for i in range(count):
        operation, text = PROBLEMS[i % len(PROBLEMS)]
        while True:  # distinct prompts: one text never lands in both splits (the GX rule prompt_text_in_one_split)
            name, item = rng.choice(NAMES), rng.choice(ITEMS)
            x, y, answer = _operands(operation, rng.randint(2, 12), rng.randint(2, 9))
            prompt = text.format(name=name, item=item, x=x, y=y) + ANSWER_FORMAT
            if prompt not in seen:
                break
        seen.add(prompt)
        tasks.append(
            {"domain": f"arith-{operation}-{i:03d}", "normalizer": "final_integer", "valid_answers": [str(answer)], "phrasings": [prompt]}
        )
    return tasks
