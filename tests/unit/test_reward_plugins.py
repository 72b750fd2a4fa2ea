"""`reward.plugins`: a user's own module registers rewards that params.yaml can then name."""

import sys

import pytest
import yaml
from typer.testing import CliRunner

from components.config import load_params
from components.grpo.trainer import train
from components.plugins import PluginError, check_registered_names
from components.rewards import REWARDS
from flows.cli import app
from tests.grpo_data import consistency_groups, tiny_params

PLUGIN = '''
from components.rewards.registry import register_reward

CALLS = []


@register_reward("test_plugin_brevity", kind="sample")
def brevity(rollout, group, cfg):
    """1 for an empty answer, falling with its length in characters."""
    CALLS.append(rollout.completion)
    return 1.0 / (1.0 + len(rollout.completion))
'''


@pytest.fixture
def plugin_project(tmp_path):
    (tmp_path / "team_rewards.py").write_text(PLUGIN)
    (tmp_path / "params.yaml").write_text(
        yaml.safe_dump({"reward": {"plugins": ["team_rewards"], "weights": {"test_plugin_brevity": 1.0}}})
    )
    yield tmp_path
    if "test_plugin_brevity" in REWARDS:
        REWARDS.pop("test_plugin_brevity")
    sys.modules.pop("team_rewards", None)


def test_a_plugin_reward_is_selectable_by_name_and_used_in_training(plugin_project, tiny_model_dir, tmp_path):
    params = load_params(plugin_project / "params.yaml")
    assert "test_plugin_brevity" not in REWARDS  # loading params imports nothing
    check_registered_names(params)
    assert "test_plugin_brevity" in REWARDS
    base = tiny_params(steps=1, groups_per_step=1)
    run = train(base.model_copy(update={"reward": params.reward, "root": params.root}), consistency_groups(2),
                tiny_model_dir, tmp_path / "ckpt", show_progress=False)  # fmt: skip
    calls = sys.modules["team_rewards"].CALLS
    assert len(calls) == 2 * 3  # one group x 2 variants x K = 3, each scored by the plugin
    expected = sum(1.0 / (1.0 + len(text)) for text in calls) / len(calls)
    assert run.history[0]["reward_mean"] == pytest.approx(expected, rel=1e-5)


def test_cli_names_a_plugin_that_cannot_be_imported(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"reward": {"plugins": ["no_such_team_module"]}}))
    result = CliRunner().invoke(app, ["show-params", "--params", str(tmp_path / "params.yaml")])
    assert result.exit_code == 2
    assert "reward.plugins: cannot import 'no_such_team_module': ModuleNotFoundError" in result.output
    with pytest.raises(PluginError):
        check_registered_names(load_params(tmp_path / "params.yaml"))


def test_without_the_plugin_the_name_is_unknown(tmp_path):
    (tmp_path / "params.yaml").write_text(yaml.safe_dump({"reward": {"weights": {"test_plugin_brevity": 1.0}}}))
    with pytest.raises(ValueError, match="reward.weights.*test_plugin_brevity"):
        check_registered_names(load_params(tmp_path / "params.yaml"))
