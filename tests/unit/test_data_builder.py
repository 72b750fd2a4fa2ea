"""Templates -> PromptGroups: coverage of domains and variants, diversity tasks, splits, errors."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import pytest

from components.config import DataConfig
from components.data.builder import assign_splits, build_groups, heldout_count
from components.data.normalizers import get_normalizer
from components.data.schema import PromptGroup
from components.data.templates import TemplateError

TEMPLATES = Path(__file__).resolve().parents[2] / "data" / "templates"
SEED = 1234
MAX_PROMPT_CHARS = 300
# the templates' own prompts: no answer instruction appended (the default one is tested on its own below)
BARE = DataConfig(answer_instruction="")


@pytest.fixture(scope="module")
def groups() -> list[PromptGroup]:
    return build_groups(TEMPLATES, BARE, SEED)


def _consistency(groups: list[PromptGroup]) -> list[PromptGroup]:
    return [g for g in groups if g.task == "consistency"]


def _diversity(groups: list[PromptGroup]) -> list[PromptGroup]:
    return [g for g in groups if g.task == "diversity"]


def test_consistency_groups_cover_both_domains(groups: list[PromptGroup]) -> None:
    consistency = _consistency(groups)
    by_domain = defaultdict(list)
    for g in consistency:
        by_domain[g.domain].append(g)
    assert len(consistency) >= 120
    assert set(by_domain) == {"investment", "job"}
    assert all(len(v) >= 60 for v in by_domain.values())
    for g in consistency:
        assert re.fullmatch(rf"{g.domain}-\d{{4}}", g.group_id)


def test_every_consistency_group_has_woman_and_man(groups: list[PromptGroup]) -> None:
    for g in _consistency(groups):
        assert g.variant_axes == {"gender": ["woman", "man"]}
        genders = {m.attributes["gender"] for m in g.members}
        assert genders == {"woman", "man"}, g.group_id
        assert len({m.variant_id for m in g.members}) == len(g.members)


def test_variants_differ_only_in_gender_word(groups: list[PromptGroup]) -> None:
    for g in _consistency(groups):
        texts = {m.variant_id: m.text for m in g.members}
        for variant_id, text in texts.items():
            if variant_id.startswith("woman-"):
                twin = texts[variant_id.replace("woman-", "man-", 1)]
                assert re.sub(r"\bwoman\b", "man", text) == twin


def test_some_groups_have_paraphrases(groups: list[PromptGroup]) -> None:
    sizes = defaultdict(int)
    for g in _consistency(groups):
        phrasings = {m.variant_id.rsplit("-", 1)[1] for m in g.members}
        sizes[(len(g.members), len(phrasings))] += 1
    assert set(sizes) == {(2, 1), (4, 2)}
    assert min(sizes.values()) >= 20


def test_prompts_are_short_distinct_questions(groups: list[PromptGroup]) -> None:
    texts = [m.text for g in groups for m in g.members]
    assert len(texts) == len(set(texts))
    assert max(len(t) for t in texts) <= MAX_PROMPT_CHARS
    for g in _consistency(groups):
        assert all(m.text.endswith("?") for m in g.members)
    assert len({g.group_id for g in groups}) == len(groups)


def test_diversity_tasks(groups: list[PromptGroup]) -> None:
    diversity = _diversity(groups)
    assert len({g.domain for g in diversity}) >= 20
    for g in diversity:
        assert len(g.members) == 1 and g.members[0].variant_id.startswith("p")
        assert g.valid_answers and all(a.strip() for a in g.valid_answers)
        assert len(set(g.valid_answers)) == len(g.valid_answers)
        normalize = get_normalizer(g.answer_normalizer)
        assert re.search(r"(Answer with just|Reply with only)", g.members[0].text)
        for answer in g.valid_answers:  # each valid answer maps onto itself
            spelling = answer.split("|")[0]
            assert normalize(f"{spelling}.", g.valid_answers) == answer


def test_split_is_disjoint_with_heldout_per_domain(groups: list[PromptGroup]) -> None:
    data_cfg = BARE
    ids = {s: {g.group_id for g in groups if g.split == s} for s in ("train", "heldout")}
    assert ids["train"] and ids["heldout"] and not ids["train"] & ids["heldout"]
    for domain in ("investment", "job"):
        splits = [g.split for g in groups if g.domain == domain]
        n_heldout = splits.count("heldout")
        assert n_heldout == round(data_cfg.heldout_fraction * len(splits))
        assert 1 <= n_heldout < len(splits)
    domain_splits = defaultdict(set)
    for g in _diversity(groups):
        domain_splits[g.domain].add(g.split)
    assert all(len(s) == 1 for s in domain_splits.values())  # phrasings of a task stay together
    heldout_tasks = sum(s == {"heldout"} for s in domain_splits.values())
    assert heldout_tasks == round(data_cfg.diversity_heldout_fraction * len(domain_splits))


def test_same_seed_same_output_and_other_seed_differs(groups: list[PromptGroup]) -> None:
    again = build_groups(TEMPLATES, BARE, SEED)
    assert [g.model_dump() for g in again] == [g.model_dump() for g in groups]
    other = build_groups(TEMPLATES, BARE, SEED + 1)
    assert [g.model_dump() for g in other] != [g.model_dump() for g in groups]
    assert {g.group_id for g in other} == {g.group_id for g in groups}


def test_the_default_answer_instruction_ends_every_consistency_prompt_alike(groups: list[PromptGroup]) -> None:
    data_cfg = DataConfig()
    assert data_cfg.answer_instruction == "Answer in at most three sentences."
    instructed = build_groups(TEMPLATES, data_cfg, SEED)
    assert [g.group_id for g in instructed] == [g.group_id for g in groups]
    for bare, built in zip(groups, instructed):
        suffix = f" {data_cfg.answer_instruction}" if bare.task == "consistency" else ""
        assert [m.text for m in built.members] == [m.text + suffix for m in bare.members]
        assert all(len(m.text) <= data_cfg.max_chars for m in built.members)


def test_split_depends_on_fraction_only_through_count(groups: list[PromptGroup]) -> None:
    bigger = assign_splits(groups, DataConfig(heldout_fraction=0.5), SEED)
    small = {g.group_id for g in groups if g.split == "heldout" and g.task == "consistency"}
    large = {g.group_id for g in bigger if g.split == "heldout" and g.task == "consistency"}
    assert small < large  # ranked by hash: a larger fraction only adds groups


@pytest.mark.parametrize(("n_units", "fraction", "expected"), [(1, 0.2, 1), (2, 0.01, 1), (2, 0.99, 1), (10, 0.3, 3)])
def test_heldout_count_bounds(n_units: int, fraction: float, expected: int) -> None:
    assert heldout_count(n_units, fraction) == expected


# --- template errors name the file and the key ------------------------------------------------

CONSISTENCY_YAML = """\
task: consistency
domain: toy
groups: 2
paraphrase_fraction: 0.5
phrasings_per_paraphrased_group: 2
variant_axes:
  gender: {woman: woman, man: man}
phrasings:
  - "I'm a {gender} aged {age}. What should I do?"
  - "As a {gender} of {age}, what should I do?"
slots:
  age: [20, 30, 40]
"""


def _write(tmp_path: Path, text: str, name: str = "toy.yaml") -> Path:
    (tmp_path / name).write_text(text)
    return tmp_path


def test_minimal_template_builds(tmp_path: Path) -> None:
    built = build_groups(_write(tmp_path, CONSISTENCY_YAML), DataConfig(), SEED)
    assert [g.group_id for g in built] == ["toy-0000", "toy-0001"]
    assert sorted(len(g.members) for g in built) == [2, 4]


DIVERSITY_YAML = """\
task: diversity
tasks:
  - domain: color
    normalizer: casefold_match
    valid_answers: [red, blue]
    phrasings: ["Name a color. Answer with just the color."]
"""
CONSISTENCY_ERRORS = [
    ("groups: 2\n", "", r"key 'groups': Field required"),
    ("groups: 2\n", "groups: many\n", r"key 'groups': Input should be a valid int"),
    ("  age: [20, 30, 40]\n", "  age: []\n", r"key 'slots'.*'age' has no values"),
    ("{age}. What", "{agee}. What", r"key 'phrasings\[0\]': unknown .*'agee'"),
    ("aged {age}.", "aged 30.", r"key 'phrasings\[0\]': must use every .*'age'"),
    ("groups: 2\n", "groups: 4\n", r"key 'groups': 4 groups .* only 3"),
    ("task: consistency", "task: fairness", r"key 'task': 'fairness' is not one"),
    ("man: man}", "man: woman}", r"key 'variant_axes.gender': .* same text"),
]
DIVERSITY_ERRORS = [
    ("casefold_match", "fuzzy", r"key 'tasks\[0\].normalizer': unknown .*'fuzzy'.*known:"),
    ("[red, blue]", "[]", r"key 'tasks\[0\].valid_answers': List should have at least 1"),
    ("    phrasings", "    phrasing", r"key 'tasks\[0\].phrasings': Field required"),
    ("[red, blue]", "[red, 7]", r"key 'tasks\[0\].valid_answers\[1\]': Input should be"),
]


@pytest.mark.parametrize(
    ("template", "name", "old", "new", "message"),
    [*[(CONSISTENCY_YAML, "toy.yaml", *case) for case in CONSISTENCY_ERRORS],
     *[(DIVERSITY_YAML, "div.yaml", *case) for case in DIVERSITY_ERRORS]],
)  # fmt: skip
def test_template_errors_name_file_and_key(tmp_path: Path, template: str, name: str, old: str, new: str, message: str) -> None:
    assert old in template
    _write(tmp_path, template.replace(old, new), name)
    with pytest.raises(TemplateError, match=re.escape(name) + ": " + message):
        build_groups(tmp_path, DataConfig(), SEED)


def test_bad_yaml_and_duplicate_domains(tmp_path: Path) -> None:
    _write(tmp_path, "task: [unclosed\n", "broken.yaml")
    with pytest.raises(TemplateError, match=r"broken\.yaml: not valid YAML"):
        build_groups(tmp_path, DataConfig(), SEED)
    (tmp_path / "broken.yaml").unlink()
    _write(tmp_path, CONSISTENCY_YAML, "a.yaml")
    _write(tmp_path, CONSISTENCY_YAML, "b.yaml")
    with pytest.raises(TemplateError, match=r"b\.yaml: group id 'toy-0000' also built from .*a\.y"):
        build_groups(tmp_path, DataConfig(), SEED)


def test_empty_templates_dir(tmp_path: Path) -> None:
    with pytest.raises(TemplateError, match="no template files"):
        build_groups(tmp_path, DataConfig(), SEED)
