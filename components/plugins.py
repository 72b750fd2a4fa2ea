"""The plug-in points of training: params fields that name a registered function.

    params field                   registry                                   decorator
    train.advantage.estimator      components.grpo.advantages.ADVANTAGES      @register_adv_est
    train.advantage.clustering     components.grpo.semantic.CLUSTERERS        @register_clusterer
    train.loss_type                components.grpo.losses.LOSS_TYPES          @register_loss_type
    train.policy_loss              components.grpo.policy_losses.POLICY_LOSSES  @register_policy_loss
    reward.weights (every key)     components.rewards.REWARDS                 @register_reward

Your own functions join these registries from your own module: list it in `reward.plugins`
(`[my_pkg.rewards]`); `load_plugins` imports it (from the project folder or the environment) before
the names are checked, in the CLI, the flow, `dvc repro` and every training process.

`check_registered_names` fails on a misspelt name before minutes of sampling. It imports the
registries (and so torch), which is why `components.config.load_params` does not call it: the
commands and steps that train call it right after loading params.
"""

from __future__ import annotations

import importlib
import sys

from components.config import Params
from components.contracts.errors import UserError
from components.generation.engines import ENGINES
from components.grpo.advantages import ADVANTAGES
from components.grpo.losses import LOSS_TYPES
from components.grpo.policy_losses import POLICY_LOSSES
from components.grpo.rollout_engines import ROLLOUT_ENGINES
from components.grpo.semantic import CLUSTERERS
from components.rewards import REWARDS


class PluginError(UserError, ValueError):
    """A module of `reward.plugins` cannot be imported."""


def load_plugins(params: Params) -> list[str]:
    """Import every module of `reward.plugins` (the project folder first on the path); their
    registration decorators run on import. Returns the module names."""
    root = str(params.root.resolve())
    if root not in sys.path:
        sys.path.insert(0, root)
    for name in params.reward.plugins:
        try:
            importlib.import_module(name)
        except Exception as exc:  # an import error in the user's module is theirs to fix: one clear line
            raise PluginError(f"reward.plugins: cannot import {name!r}: {type(exc).__name__}: {exc}") from exc
    return list(params.reward.plugins)


def check_registered_names(params: Params) -> None:
    """Import `reward.plugins`, then raise `UnknownNameError` (a ValueError) naming the field, the
    unknown names and the known ones."""
    load_plugins(params)
    train = params.train
    ADVANTAGES.check([train.advantage.estimator], where="train.advantage.estimator")
    LOSS_TYPES.check([train.loss_type], where="train.loss_type")
    POLICY_LOSSES.check([train.policy_loss], where="train.policy_loss")
    CLUSTERERS.check([train.advantage.clustering], where="train.advantage.clustering")
    REWARDS.check(list(params.reward.weights), where="reward.weights")
    from components.generation import transformers_engine, vllm_engine  # noqa: F401  (they register on import)

    ENGINES.check([params.eval.engine], where="eval.engine")
    ROLLOUT_ENGINES.check([train.rollout.engine], where="train.rollout.engine")
