"""The Prefect flows and the `groupwise` CLI. Every flow run here is tied to its process: a temporary
Prefect server it starts dies with it, even after `kill -9` (`flows.prefect_server`,
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
    "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "90",  # a temporary server on a busy 2-core machine
    "TOKENIZERS_PARALLELISM": "false",
}
for _name, _value in RUNTIME_DEFAULTS.items():
    os.environ.setdefault(_name, _value)

from flows.prefect_server import guard_temporary_server  # noqa: E402  (after the environment above)

guard_temporary_server()
