"""Checkable instructions: IFEval's families (lm-eval's checkers), split into train and held-out
families, drawn one a group (`families`), and judged strict and loose (`ifeval`)."""
