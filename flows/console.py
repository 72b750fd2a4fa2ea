"""What the `groupwise` console leaves out: the routine lines of the libraries it runs, so that the
steps, the progress bars and the verdict are what a user reads. Warnings and errors still show.

- Prefect: a flow or task run that begins or finishes as planned ("Finished in state Completed()";
  a failed state is an ERROR and shows).
- Great Expectations: its INFO lines (the temporary folder of an ephemeral Data Docs site).
- MLflow's SQLite store: its INFO lines while it creates or migrates its tables (MLflow's and
  Alembic's).

Each is a `logging.Filter` on the logger that emits the line, so a library's own logging setup
(MLflow runs Alembic's `fileConfig`) does not undo it. vLLM's engines log to their own file
(`components.generation.vllm_process.log_engines_to`).
"""

from __future__ import annotations

import logging

ROUTINE_RUN_MESSAGES = ("Finished in state Completed", "Finished in state Cached", "Beginning flow run", "Created task run")
# a logger filter sees only the records of its own logger, not its children's: the emitting loggers by name
QUIET_INFO_LOGGERS = ("great_expectations.data_context.types.base", "mlflow.store.db.utils", "alembic.runtime.migration")
RUN_LOGGERS = ("prefect.flow_runs", "prefect.task_runs")


class WarningsOnly(logging.Filter):
    """Passes WARNING and above."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO


class NoRoutineRunLines(logging.Filter):
    """Drops the INFO lines of a run that begins or finishes as planned."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno > logging.INFO or not str(record.msg).startswith(ROUTINE_RUN_MESSAGES)


def quiet_console() -> None:
    """Install the filters (once; calling again changes nothing)."""
    for names, kind in ((QUIET_INFO_LOGGERS, WarningsOnly), (RUN_LOGGERS, NoRoutineRunLines)):
        for name in names:
            logger = logging.getLogger(name)
            if not any(isinstance(f, kind) for f in logger.filters):
                logger.addFilter(kind())
