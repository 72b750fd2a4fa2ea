"""Checkers of your own, beside IFEval's: a class with IFEval's interface (`__init__(instruction_id)`,
`build_description(**kwargs) -> str`, `check_following(response) -> bool`, `get_instruction_args()`)
registered by name, from a module of `reward.plugins`:

    @register_instruction("mine:ends_with_thanks")
    class EndsWithThanks: ...

A families file may then list it like an IFEval id; lm-eval's strict and loose scoring judge it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from components.contracts.naming import NameRegistry

INSTRUCTION_CHECKERS: NameRegistry[Callable[[str], Any]] = NameRegistry("instruction checker")
register_instruction = INSTRUCTION_CHECKERS.register
