"""Promotion and rollback of registered versions (what `groupwise promote` / `rollback` run)."""

from __future__ import annotations

from functools import partial

from components.config import Params
from components.release.promotion import promotion_check
from components.tracking import model_registry, runs
from components.tracking.model_registry import PromotionResult


def promote(params: Params, version: str, reason: str = "", force: bool = False) -> PromotionResult:
    """Move @champion to `version` (gates checked; `force` needs a reason, which is recorded)."""
    runs.configure(params.tracking)
    reg = params.registry
    return model_registry.promote(
        reg.model_name,
        version,
        partial(promotion_check, gate=params.gate),
        reason=reason,
        force=force,
        champion_alias=reg.champion_alias,
        previous_alias=reg.previous_champion_alias,
        lock_timeout=reg.lock_timeout_seconds,
    )


def rollback(params: Params, reason: str = "") -> PromotionResult:
    """Give @champion back to @previous-champion."""
    runs.configure(params.tracking)
    reg = params.registry
    return model_registry.rollback(
        reg.model_name,
        reason=reason,
        champion_alias=reg.champion_alias,
        previous_alias=reg.previous_champion_alias,
        lock_timeout=reg.lock_timeout_seconds,
    )
