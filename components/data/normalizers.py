"""Answer normalisers: map a model completion onto a diversity task's set of valid answers.

A normaliser is a plain function ``(completion, valid_answers) -> str | None``, registered by name
(``@register_normalizer("integer")``) so that a `PromptGroup` can name its normaliser in
``answer_normalizer``. It returns the *entry of ``valid_answers``* the completion gives as its
answer, or ``None`` when the completion gives no valid answer. The frequency-aware (GAPO) reward
counts these entries inside a group; evaluation uses them for validity (share not ``None``) and
coverage (distinct entries / ``len(valid_answers)``).

Aliases: a valid answer may list spellings separated by ``|`` (``"autumn|fall"``); any spelling
matches and the whole entry is returned, so aliases count as one answer.

Registered:

- ``casefold_match``: the valid answer mentioned *first* in the completion, as a whole word or
  phrase, case-insensitive; at equal start the longest wins ("South Korea" over "Korea"); words of a
  phrase may be separated by spaces or hyphens; a plural ending (``s``/``es``) is tolerated, so
  answers are written in the singular ("heart" matches "Hearts").
- ``exact``: the whole completion, stripped of spaces, quotes, ``*`` and final punctuation, equals a
  valid answer (case-insensitive). Strict; for answers that must stand alone.
- ``integer``: the first integer in the completion (digits with an optional minus sign; decimals
  such as "3.5" are skipped), compared by value ("07" is 7). If that integer is not valid: ``None``.
- ``final_integer``: the answer parser of the arithmetic tasks: the integer after the last "answer
  is" / "=" / "####" marker when there is one, else the *last* integer of the completion (working
  shown before the result, as GSM8K answers end); thousands separators ("1,200") are read. If that
  integer is not valid: ``None``.
- ``letter``: a single-letter answer (vowels, note names A–G). The whole completion if it is one
  letter; else the first quoted or bold letter ('E', "E", *E*, **E**); else the *last* stand-alone
  valid letter, not counting a lower-case "a" (the article) or "I" followed by a word (the pronoun).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import TypeVar

from components.contracts.naming import NameRegistry, UnknownNameError

Normalizer = Callable[[str, Sequence[str]], str | None]
ALIAS_SEPARATOR = "|"

NORMALIZERS = NameRegistry[Normalizer]("answer normaliser")
_F = TypeVar("_F", bound=Normalizer)
UnknownNormalizerError = UnknownNameError  # the name callers catch; one error for every registry


def register_normalizer(name: str) -> Callable[[_F], _F]:
    """Register a normaliser under `name` (a name may be registered once)."""
    return NORMALIZERS.register(name)


def normalizer_names() -> list[str]:
    """Names of the registered normalisers, sorted."""
    return NORMALIZERS.names()


def get_normalizer(name: str) -> Normalizer:
    """The normaliser registered as `name`; an unknown name raises `UnknownNormalizerError`."""
    return NORMALIZERS.get(name)


def normalize_answer(name: str, completion: str, valid_answers: Sequence[str]) -> str | None:
    """Apply the normaliser `name` to one completion."""
    return get_normalizer(name)(completion, valid_answers)


def aliases(answer: str) -> list[str]:
    """The spellings of one valid answer entry: ``"autumn|fall"`` -> ``["autumn", "fall"]``."""
    return [a.strip() for a in answer.split(ALIAS_SEPARATOR) if a.strip()]


def _phrase_pattern(spelling: str) -> re.Pattern[str]:
    words = [re.escape(w) for w in re.split(r"[\s-]+", spelling.casefold()) if w]
    return re.compile(r"(?<!\w)" + r"[\s-]+".join(words) + r"(?:e?s)?(?!\w)")


DEFAULT_NORMALIZER = "casefold_match"  # what a diversity task that names no normaliser is read with


@register_normalizer(DEFAULT_NORMALIZER)
def casefold_match(completion: str, valid_answers: Sequence[str]) -> str | None:
    """First valid answer mentioned as a whole word/phrase (case-insensitive); longest on ties."""
    text = completion.casefold()
    best: tuple[int, int] | None = None  # (start, -length): smaller is better
    chosen: str | None = None
    for answer in valid_answers:
        for spelling in aliases(answer):
            match = _phrase_pattern(spelling).search(text)
            if match is None:
                continue
            key = (match.start(), -(match.end() - match.start()))
            if best is None or key < best:
                best, chosen = key, answer
    return chosen


_EDGE_JUNK = " \t\r\n\"'`*_.,;:!?()[]"


@register_normalizer("exact")
def exact(completion: str, valid_answers: Sequence[str]) -> str | None:
    """The whole completion (trimmed of quotes, ``*`` and punctuation) equals a valid answer."""
    said = " ".join(completion.strip(_EDGE_JUNK).casefold().split())
    for answer in valid_answers:
        if any(said == " ".join(s.casefold().split()) for s in aliases(answer)):
            return answer
    return None


_NUMBER = re.compile(r"(?<![\w.])-?\d+(?:[.,]\d+)*(?![\w])")
_PLAIN_INTEGER = re.compile(r"-?\d+")


@register_normalizer("integer")
def integer(completion: str, valid_answers: Sequence[str]) -> str | None:
    """First integer in the completion, if its value is a valid answer (decimals are skipped)."""
    for match in _NUMBER.finditer(completion):
        token = match.group()
        if not _PLAIN_INTEGER.fullmatch(token):
            continue
        value = int(token)
        for answer in valid_answers:
            if any(_PLAIN_INTEGER.fullmatch(s) and int(s) == value for s in aliases(answer)):
                return answer
        return None
    return None


_ANSWER_MARKER = re.compile(r"(?:answer\s*(?:is|:)|=|####)", re.IGNORECASE)
_GROUPED_INTEGER = re.compile(r"(?<![\w.,])-?\d{1,3}(?:,\d{3})+(?![\w]|[.,]\d)|(?<![\w.,])-?\d+(?![\w]|[.,]\d)")


@register_normalizer("final_integer")
def final_integer(completion: str, valid_answers: Sequence[str]) -> str | None:
    """The first integer after the last answer marker, else the last integer (see the module docstring)."""
    markers = list(_ANSWER_MARKER.finditer(completion))
    tail = completion[markers[-1].end():] if markers else completion
    numbers = _GROUPED_INTEGER.findall(tail)
    if not numbers:
        return None
    token = numbers[0] if markers else numbers[-1]
    value = int(token.replace(",", ""))
    for answer in valid_answers:
        if any(_PLAIN_INTEGER.fullmatch(s) and int(s) == value for s in aliases(answer)):
            return answer
    return None


_QUOTED_LETTER = re.compile(r"""(?:\*\*|\*|["'`‘“])([A-Za-z])(?:\*\*|\*|["'`’”])""")
_LONE_LETTER = re.compile(r"(?<![\w'’])([A-Za-z])(?![\w'’])")
_PRONOUN_I = re.compile(r"\s+[A-Za-z]")


@register_normalizer("letter")
def letter(completion: str, valid_answers: Sequence[str]) -> str | None:
    """Single letter: whole completion, else first quoted/bold letter, else last lone letter."""
    by_letter = {s.casefold(): answer for answer in valid_answers for s in aliases(answer)}
    whole = completion.strip(_EDGE_JUNK)
    if len(whole) == 1:
        return by_letter.get(whole.casefold())
    for match in _QUOTED_LETTER.finditer(completion):
        if match.group(1).casefold() in by_letter:
            return by_letter[match.group(1).casefold()]
    chosen: str | None = None
    for match in _LONE_LETTER.finditer(completion):
        char = match.group(1)
        if char == "a":
            continue  # the article
        if char == "I" and _PRONOUN_I.match(completion, match.end()):
            continue  # the pronoun
        chosen = by_letter.get(char.casefold(), chosen)
    return chosen
