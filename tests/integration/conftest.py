import os

import pytest


@pytest.fixture(scope="session")
def prefect_harness():
    """One real, temporary Prefect API (SQLite) for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


@pytest.fixture(scope="session")
def mlflow_server_url(tmp_path_factory):
    """A real `mlflow server` on loopback for the session: PostgreSQL backend when Debian's
    PostgreSQL and psycopg2 are installed (CI installs them), else SQLite. Yields (url, backend)."""
    from contextlib import ExitStack

    from tests.integration.servers import mlflow_server, postgres_available, postgres_server

    folder = tmp_path_factory.mktemp("mlflow-server")
    with ExitStack() as stack:
        if postgres_available():
            backend, kind = stack.enter_context(postgres_server()), "postgresql"
        elif os.environ.get("GROUPWISE_REQUIRE_POSTGRES") == "1":  # CI: no silent downgrade to SQLite
            pytest.fail("GROUPWISE_REQUIRE_POSTGRES=1 but PostgreSQL (initdb, pg_ctl, psycopg2) is not available")
        else:
            backend, kind = f"sqlite:///{folder / 'mlflow.db'}", "sqlite"
        yield stack.enter_context(mlflow_server(backend, folder / "artifacts")), kind


@pytest.fixture(scope="session")
def prefect_server_url(tmp_path_factory):
    """A real `prefect server start` on loopback (its own PREFECT_HOME) for the session."""
    from tests.integration.servers import prefect_server

    with prefect_server(tmp_path_factory.mktemp("prefect-server-home")) as url:
        yield url
