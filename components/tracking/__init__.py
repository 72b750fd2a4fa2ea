"""The one place in components/ that talks to MLflow: runs, artifacts, the model registry."""
