"""Answer normalisers: hand cases for each registered normaliser and the registry."""

from __future__ import annotations

import pytest

from components.data.normalizers import (
    UnknownNormalizerError,
    get_normalizer,
    normalize_answer,
    normalizer_names,
    register_normalizer,
)

ASIA = ["China", "India", "South Korea", "North Korea", "Myanmar|Burma", "Timor-Leste|East Timor"]
SUITS = ["heart", "diamond", "club", "spade"]
ONE_TO_TEN = [str(i) for i in range(1, 11)]
VOWELS = ["A", "E", "I", "O", "U"]


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("India", "India"),
        ("**india**", "India"),
        ("I would say south korea.", "South Korea"),  # longest phrase at the same position
        ("India or China", "India"),  # first mentioned wins
        ("Probably China, maybe India", "China"),
        ("burma!", "Myanmar|Burma"),  # alias -> whole entry
        ("East-Timor", "Timor-Leste|East Timor"),  # hyphen/space equivalent
        ("Korea", None),  # not a whole valid answer
        ("Chinese food", None),  # whole words only
        ("", None),
    ],
)
def test_casefold_match_countries(completion: str, expected: str | None) -> None:
    assert get_normalizer("casefold_match")(completion, ASIA) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [("Hearts", "heart"), ("SPADES.", "spade"), ("clubhouse", None), ("A diamond.", "diamond")],
)
def test_casefold_match_tolerates_plurals(completion: str, expected: str | None) -> None:
    assert get_normalizer("casefold_match")(completion, SUITS) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("7", "7"),
        ("I pick 7.", "7"),
        ("07", "7"),
        ("Number: 10!", "10"),
        ("3.5 or 4", "4"),  # decimals are skipped
        ("42, then 3", None),  # the first integer is the answer, and it is out of range
        ("-2", None),
        ("eleven", None),
        ("no number here", None),
    ],
)
def test_integer(completion: str, expected: str | None) -> None:
    assert get_normalizer("integer")(completion, ONE_TO_TEN) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("E", "E"),
        ("e.", "E"),
        ('"u"', "U"),
        ("The vowel is E.", "E"),
        ("I think it is O", "O"),  # pronoun "I" skipped
        ("A is a vowel.", "A"),  # lower-case article skipped
        ("I pick **I**", "I"),  # bold letter preferred
        ("a vowel: e", "E"),
        ("I", "I"),
        ("B", None),
        ("None of them", None),
    ],
)
def test_letter(completion: str, expected: str | None) -> None:
    assert get_normalizer("letter")(completion, VOWELS) == expected


@pytest.mark.parametrize(
    ("completion", "expected"),
    [('  "China". ', "China"), ("south  korea", "South Korea"), ("china is big", None)],
)
def test_exact(completion: str, expected: str | None) -> None:
    assert get_normalizer("exact")(completion, ASIA) == expected


def test_registry_lists_known_names_on_unknown() -> None:
    assert {"casefold_match", "integer", "letter", "exact"} <= set(normalizer_names())
    with pytest.raises(UnknownNormalizerError, match=r"'fuzzy'.*known: \['casefold_match'"):
        get_normalizer("fuzzy")
    assert isinstance(UnknownNormalizerError("x"), ValueError)


def test_register_and_duplicate_name() -> None:
    name = "test_first_word"

    @register_normalizer(name)
    def first_word(completion: str, valid_answers: list[str]) -> str | None:
        word = completion.split()[0] if completion.split() else ""
        return word if word in valid_answers else None

    assert normalize_answer(name, "yes please", ["yes", "no"]) == "yes"
    with pytest.raises(ValueError, match="already registered"):
        register_normalizer(name)(first_word)
