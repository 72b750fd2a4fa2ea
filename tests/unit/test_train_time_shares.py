"""A training run says where its steps' time went (the train step's summary line, `make run`)."""

from pathlib import Path

import pytest

from components.grpo.trainer import TrainResult


def test_time_shares_sum_the_phases_over_steps_and_leave_the_rest_as_other():
    history = [
        {"step_time_s": 10.0, "generation_time_s": 6.0, "time/reward_s": 1.0, "time/forward_backward_s": 2.0},
        {"step_time_s": 10.0, "generation_time_s": 4.0, "time/reward_s": 1.0, "time/forward_backward_s": 2.0, "time/optimizer_s": 1.0},
    ]
    result = TrainResult(Path("."), steps=2, samples=24, seconds=20.0, history=history)
    shares = result.time_shares()
    assert shares == pytest.approx({"rollouts": 0.5, "reward": 0.1, "forward/backward": 0.2, "optimizer": 0.05, "other": 0.15})
    assert "reference" not in shares  # a phase that took no time (no reference model) is not listed
    assert result.time_line() == "time: rollouts 50 %, reward 10 %, forward/backward 20 %, optimizer 5 %, other 15 %"


def test_no_timed_step_gives_no_time_line():
    assert TrainResult(Path("."), steps=0, samples=0, seconds=0.0).time_line() == ""
