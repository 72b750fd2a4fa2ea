"""Scheduled retraining: serve the `retrain` flow as a Prefect deployment on a cron from params.yaml.

`groupwise schedule` calls `serve_retrain`: it creates (or updates) the deployment
`retrain/<schedule.deployment>` with a `Cron(schedule.cron, timezone=schedule.timezone)` schedule
and then runs the scheduled and triggered flow runs in this process until interrupted. Scheduling
needs a Prefect server (`prefect server start`, or `infra/`): the ephemeral API cannot schedule.
For a team, `prefect.yaml` declares the same deployment for a work pool served by a worker.
"""

from __future__ import annotations

import os
from pathlib import Path

from components.config import Params, load_params
from components.contracts.errors import UserError

RUN_LIMIT = 1  # one retrain at a time per served process: runs share the project's output folders


def deployment_parameters(params_path: Path, params: Params) -> dict:
    """Parameters of every scheduled run: the params file (absolute), the schedule's profile and no
    overrides (a run triggered by hand may pass `-S` assignments as `overrides`)."""
    return {"params_path": str(Path(params_path).resolve()), "profile": params.schedule.profile, "overrides": []}


class ServerRequiredError(UserError, RuntimeError):
    """The command needs a running Prefect server."""


def require_server() -> str:
    """The Prefect API URL; a clear error when none is set (the ephemeral API cannot schedule)."""
    from prefect.settings import PREFECT_API_URL

    url = PREFECT_API_URL.value() or os.environ.get("PREFECT_API_URL")
    if not url:
        raise ServerRequiredError(
            "scheduling needs a Prefect server: start one (`infra/local-servers.sh start` or "
            "`prefect server start`) and set PREFECT_API_URL=http://127.0.0.1:4200/api"
        )
    return url


def serve_retrain(params_path: Path, profile: str | None = None) -> None:
    """Create/update the cron deployment and serve it (blocks until interrupted)."""
    from prefect.schedules import Cron

    from flows.retrain import retrain

    params = load_params(params_path, profile)
    if profile is not None:
        params = params.model_copy(update={"schedule": params.schedule.model_copy(update={"profile": profile})})
    require_server()
    retrain.serve(
        name=params.schedule.deployment,
        schedules=[Cron(params.schedule.cron, timezone=params.schedule.timezone)],
        parameters=deployment_parameters(params_path, params),
        tags=["groupwise", "retrain"],
        description=f"groupwise retrain on cron '{params.schedule.cron}' ({params.schedule.timezone})",
        limit=RUN_LIMIT,
    )
