import pytest


@pytest.fixture(scope="session")
def prefect_harness():
    """One real, temporary Prefect API (SQLite) for the whole session."""
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield
