#!/bin/bash
# Create one database per name in POSTGRES_MULTIPLE_DATABASES (run once by the postgres image).
set -euo pipefail
for db in ${POSTGRES_MULTIPLE_DATABASES//,/ }; do
  psql -v ON_ERROR_STOP=1 --username "$POSTGRES_USER" --dbname postgres -c "CREATE DATABASE \"$db\";"
done
