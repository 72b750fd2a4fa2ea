"""Validation as a precondition: `train` and `evaluate` read only groups files that passed.

A passing report is trusted only for the files it hashed, the rule settings it ran with and a
tokenizer that checked the token rules; anything else (a file edited or rebuilt since, no report,
a failing one, bounds changed in params.yaml, a report from before the model was prepared) is
validated again first, writing the report, and a failure stops the step with the rule's message.
"""

from __future__ import annotations

import json
from pathlib import Path

from components.config import DataConfig, Params
from components.validation.suite import groups_sha256, rule_settings, validate_groups
from components.validation.tokens import TokenizerInfo, tokenizer_sha256


def stale_reason(
    groups_dir: Path, data_cfg: DataConfig, report_path: Path, model_dir: Path | None, families_path: Path | None = None
) -> str | None:
    """Why the report at `report_path` does not vouch for these files (None: it does)."""
    try:
        saved = json.loads(Path(report_path).read_text())
    except (OSError, ValueError):
        return f"no readable validation report at {report_path}"
    settings = saved.get("settings") or {}
    if saved.get("success") is not True:
        return f"{report_path} records a failed validation"
    if saved.get("groups_sha256") != groups_sha256(groups_dir):
        return f"{groups_dir} changed since {report_path} was written"
    if any(settings.get(k) != v for k, v in rule_settings(data_cfg, families_path).items()):
        return f"{report_path} was written with other data rules, bounds or instruction families"
    if settings.get("tokenizer_sha256") is None or settings.get("tokenizer_sha256") != tokenizer_sha256(model_dir):
        return f"{report_path} was not checked with this model's tokenizer"
    return None


def ensure_validated(groups_dir: Path, data_cfg: DataConfig, report_path: Path, model_dir: Path, families_path: Path | None = None) -> str:
    """Validate the groups files unless a passing report vouches for them; a one-line note of which."""
    reason = stale_reason(groups_dir, data_cfg, report_path, model_dir, families_path)
    if reason is None:
        return "groups files: the validation report matches them"
    tokenizer = TokenizerInfo.load(model_dir) if tokenizer_sha256(model_dir) else None
    validate_groups(groups_dir, data_cfg, report_path, tokenizer, families_path)  # GroupValidationError names file, line, rule
    return f"groups files validated first ({reason})"


def ensure_params_validated(params: Params) -> str:
    """`ensure_validated` for the groups files, rules, base model and instruction families that `params`
    (`components.config.Params`) name: what `train`, `evaluate` and a study check before they read the groups."""
    paths = params.paths
    return ensure_validated(paths.groups, params.data, paths.validation / "report.json", paths.base_model, paths.instruction_families)
