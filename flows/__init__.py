"""The Prefect flows and the `groupwise` CLI. Every flow run here is tied to its process: a temporary
Prefect server it starts dies with it, even after `kill -9` (`flows.prefect_server`,
`flows.prefect_guard`)."""

from flows.prefect_server import guard_temporary_server

guard_temporary_server()
