"""Where an evaluation's time went (`Evaluation.phase_seconds`, `time_line`): the engine start,
sampling, each fairness benchmark's prefill, embeddings and scoring, statistics and the report."""

from pathlib import Path
from types import SimpleNamespace

from components.reporting.evaluation_run import Evaluation


def evaluation(generation: dict, phases: dict, statistics: float) -> Evaluation:
    frames = SimpleNamespace(generation=generation, phase_seconds=phases)
    return Evaluation(None, frames, [], None, Path("samples.csv"), statistics)


def test_the_phases_add_the_sampling_of_both_models_and_give_each_benchmarks_prefill():
    result = evaluation(
        {"base": {"seconds": 100.0}, "tuned": {"seconds": 80.0}, "discrim_eval_base": {"seconds": 30.0},
         "discrim_eval_tuned": {"seconds": 30.0}, "bbq_base": {"seconds": 10.0}, "bbq_tuned": {"seconds": 10.0}},
        {"engine start": 20.0, "embeddings and scoring": 15.0, "discrim_eval prefill": 60.0, "bbq prefill": 20.0},
        5.0,
    )  # fmt: skip
    assert result.phase_seconds() == {
        "engine start": 20.0, "sampling": 180.0, "discrim_eval prefill": 60.0, "bbq prefill": 20.0,
        "embeddings and scoring": 15.0, "statistics and report": 5.0,
    }  # fmt: skip
    assert result.time_line() == (
        "time: engine start 7 %, sampling 60 %, discrim_eval prefill 20 %, bbq prefill 7 %, "
        "embeddings and scoring 5 %, statistics and report 2 % (of 300 s)"
    )


def test_cached_base_outputs_leave_sampling_to_the_candidate_and_nothing_timed_gives_no_line():
    result = evaluation({"base": {"seconds": 0.0, "reused": 1}, "tuned": {"seconds": 50.0}}, {}, 0.0)
    assert result.time_line() == "time: sampling 100 % (of 50 s)"
    assert evaluation({}, {}, 0.0).time_line() == ""
