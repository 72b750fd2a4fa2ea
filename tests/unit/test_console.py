"""The console filters (`flows.console`): the routine INFO lines of Prefect, GX and MLflow's store go,
their warnings and errors stay, and our own step lines stay."""

import logging

import pytest

from flows.console import QUIET_INFO_LOGGERS, quiet_console


@pytest.fixture
def captured():
    records: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record)

    handler = Keep(level=logging.DEBUG)  # on each logger itself: another test may have set up Prefect's logging
    names = (*QUIET_INFO_LOGGERS, "prefect.task_runs")
    saved = {name: (logging.getLogger(name).level, list(logging.getLogger(name).filters)) for name in names}
    for name in names:
        logging.getLogger(name).setLevel(logging.INFO)
        logging.getLogger(name).addHandler(handler)
    yield records
    for name, (level, filters) in saved.items():
        logging.getLogger(name).setLevel(level)
        logging.getLogger(name).filters = filters
        logging.getLogger(name).removeHandler(handler)


def test_routine_lines_go_and_warnings_and_step_lines_stay(captured):
    quiet_console()
    quiet_console()  # idempotent
    assert sum(type(f).__name__ == "NoRoutineRunLines" for f in logging.getLogger("prefect.task_runs").filters) == 1
    task = logging.getLogger("prefect.task_runs")
    task.info("Finished in state Completed()")
    task.info("Finished in state Cached(type=COMPLETED)")
    task.error("Finished in state Failed('Task run encountered an exception')")
    task.info("[engines] vLLM's own log: data/logs/engines.log")
    store = logging.getLogger("mlflow.store.db.utils")
    store.info("Creating initial MLflow database tables...")
    store.warning("the store is read-only")
    logging.getLogger("alembic.runtime.migration").info("Context impl SQLiteImpl.")
    logging.getLogger("great_expectations.data_context.types.base").info("Created temporary directory '/tmp/x'")
    shown = [r.getMessage() for r in captured]
    assert shown == [
        "Finished in state Failed('Task run encountered an exception')",
        "[engines] vLLM's own log: data/logs/engines.log",
        "the store is read-only",
    ]
