"""`torchrun --nproc-per-node N -m flows.study_train PARAMS STUDY ARM PARENT_RUN [--resume]`: one study
arm's training on N processes (`flows.study.train_arm` starts it when $GROUPWISE_STUDY_NPROC_PER_NODE
is above 1). Every rank rebuilds the arm's params from the params file (its study profile and the
arm's overrides) and runs `flows.steps.train`: whole groups per rank, rank 0 logs and writes."""

from __future__ import annotations

import sys


def main(argv: list[str]) -> None:
    from components.study.domain import arm_params, load_study
    from flows import steps

    resume = "--resume" in argv
    params_file, study_name, arm, parent = [a for a in argv if a != "--resume"]
    params, study = load_study(params_file, study_name)
    steps.train(arm_params(params, study, arm), parent or None, resume=resume)


if __name__ == "__main__":
    main(sys.argv[1:])
