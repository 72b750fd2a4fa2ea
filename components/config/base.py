"""The base of every params section (unknown keys refused, no booleans for numbers) and the params error."""

from __future__ import annotations

from typing import Any

from pydantic import AfterValidator, BaseModel, ConfigDict, ValidationInfo, field_validator

from components.contracts.errors import UserError
from components.machine import resolve_cpu_matmul, resolve_dtype, resolve_precision

_NUMBER_TYPES = (int, float, int | None, float | None)
# engine dtypes resolve `auto` when the params are read, so that what is logged, fingerprinted and started is the
# dtype that runs (bfloat16 where the machine computes it, else float32)
_ENGINE_DTYPE = AfterValidator(resolve_dtype)
_TRAIN_PRECISION = AfterValidator(resolve_precision)  # the same rule for the trainer's autocast
_CPU_MATMUL = AfterValidator(resolve_cpu_matmul)  # and for the kernel of its frozen fp32 matmuls


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_booleans_as_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        """`lr: true` is a typo, not 1.0: YAML booleans are refused where a number is expected."""
        if isinstance(value, bool) and info.field_name in cls.model_fields:
            annotation = cls.model_fields[info.field_name].annotation
            if annotation in _NUMBER_TYPES:
                raise ValueError(f"expected a number, got the boolean {str(value).lower()}")
        return value


class ParamsError(UserError, ValueError):
    """params.yaml is missing, unreadable or has a bad value (the message names file and field)."""
