"""The seams between groupwise's packages, each defined once.

This package is the ground floor: it imports nothing from `components` or `flows` above it, so every
other package may depend on it. A value that crosses a package boundary (rollouts, the evaluation
summary that is `metrics.json`, version tags, the checkpoint layout, names in a registry, atomic
writes) has its one typed definition here.
"""
