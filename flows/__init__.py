"""The Prefect flows and the `groupwise` CLI. Every flow run here is tied to its process: the Prefect
server a command starts for itself dies with it, even after `kill -9` (`flows.prefect_api`,
`flows.prefect_guard`).

The environment `make` sets is also the CLI's own default (`RUNTIME_DEFAULTS`), set before Prefect or
transformers is imported, so `groupwise` run directly behaves as under `make`; a value already in the
environment wins.
"""

import os

RUNTIME_DEFAULTS = {
    "HF_HUB_OFFLINE": "1",  # nothing is downloaded from a model hub at run time
    "TRANSFORMERS_OFFLINE": "1",
    "GIT_PYTHON_REFRESH": "quiet",
    "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # no telemetry (offline, it only logs an error)
    "TOKENIZERS_PARALLELISM": "false",
}
for _name, _value in RUNTIME_DEFAULTS.items():
    os.environ.setdefault(_name, _value)
