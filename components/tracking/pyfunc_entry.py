"""MLflow "models from code" entry point: MLflow runs this file to build the served model.

Logging a file instead of a pickled object keeps arbitrary-code deserialisation out of the
registry (https://mlflow.org/docs/latest/ml/model/models-from-code/).
"""

from mlflow.models import set_model

from components.tracking.pyfunc_model import GroupwiseLoraModel

set_model(GroupwiseLoraModel())
