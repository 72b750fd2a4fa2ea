"""The KL reference π_ref of a training run (`train.reference`).

`base`: the base model, i.e. the peft model with its LoRA disabled (the GRPO default, DeepSeekMath's
KL to the initial policy when a run starts from a fresh adapter). `start`: the adapter the run started
from (`train.init_adapter`), frozen. A run that starts from a tuned adapter with the base as
reference is pulled back towards the base as well as towards its reward; with `start` the KL keeps
everything the start adapter does except what the reward pays to change (e.g. removing a disparity
from a biased model without undoing the rest of its tuning).

peft has no frozen second copy of one LoRA short of a second adapter and its trainability rules, so
`start` swaps weights instead: the reference pass loads the start adapter's tensors into the LoRA,
runs under no_grad, and puts the trained tensors back (a LoRA is a few MB; the optimizer state is
untouched).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Reference:
    """π_ref: the LoRA-disabled base (`weights` None) or a frozen adapter's LoRA tensors."""

    weights: dict[str, torch.Tensor] | None = None

    @classmethod
    def of(cls, reference: str, start: dict[str, torch.Tensor] | None) -> "Reference":
        """`train.reference`: base, or start (the LoRA tensors `train.init_adapter` was read into)."""
        if reference == "base":
            return cls()
        if start is None:
            raise ValueError("train.reference: start needs train.init_adapter")
        return cls({k: v.detach().clone() for k, v in start.items()})

    @contextmanager
    def policy(self, model) -> Iterator[None]:
        """Inside: `model` computes π_ref (call under torch.no_grad)."""
        if self.weights is None:
            with model.disable_adapter():
                yield
            return
        from peft import get_peft_model_state_dict, set_peft_model_state_dict

        trained = {k: v.detach().clone() for k, v in get_peft_model_state_dict(model).items()}
        set_peft_model_state_dict(model, self.weights)
        try:
            yield
        finally:
            set_peft_model_state_dict(model, trained)

    def is_policy(self, model) -> bool:
        """True while `model`'s LoRA computes π_ref exactly: every `lora_B` zero (`base`: a fresh adapter's
        B is initialised to zero, so its delta B·A·x is exactly 0) or the start adapter's tensors unchanged
        (`start`), with nothing but the LoRA trainable (a DoRA magnitude or a `modules_to_save` copy is
        not known to be exact). A run's first step is such a step: its reference pass can be left out."""
        trainable = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
        if not trainable or any("lora_A" not in name and "lora_B" not in name for name, _ in trainable):
            return False
        with torch.no_grad():
            if self.weights is None:
                return not any(bool(p.any()) for name, p in trainable if "lora_B" in name)
            from peft import get_peft_model_state_dict

            current = get_peft_model_state_dict(model)
            return current.keys() == self.weights.keys() and all(
                torch.equal(current[k], v.to(current[k].device)) for k, v in self.weights.items()
            )


BASE = Reference()
