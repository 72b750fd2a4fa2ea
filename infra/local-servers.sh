#!/usr/bin/env bash
# Start/stop an MLflow tracking server and a Prefect server on loopback, for a shared setup.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${BIN:-.venv/bin}
HOST=${GROUPWISE_HOST:-127.0.0.1}
STATE=.servers
mkdir -p "$STATE" mlruns-server

case "${1:-}" in
  start)
    "$BIN/mlflow" server --host "$HOST" --port "${MLFLOW_PORT:-5000}" \
      --backend-store-uri "sqlite:///$PWD/mlruns-server/mlflow.db" \
      --artifacts-destination "$PWD/mlruns-server/artifacts" >"$STATE/mlflow.log" 2>&1 &
    echo $! >"$STATE/mlflow.pid"
    PREFECT_SERVER_ANALYTICS_ENABLED=false "$BIN/prefect" server start --host "$HOST" \
      --port "${PREFECT_PORT:-4200}" >"$STATE/prefect.log" 2>&1 &
    echo $! >"$STATE/prefect.pid"
    echo "MLflow: http://$HOST:${MLFLOW_PORT:-5000}  Prefect: http://$HOST:${PREFECT_PORT:-4200} (logs in $STATE/)"
    ;;
  stop)
    for name in mlflow prefect; do
      if [[ -f "$STATE/$name.pid" ]]; then kill "$(cat "$STATE/$name.pid")" 2>/dev/null || true; rm -f "$STATE/$name.pid"; fi
    done
    ;;
  *) echo "usage: $0 start|stop" >&2; exit 2 ;;
esac
