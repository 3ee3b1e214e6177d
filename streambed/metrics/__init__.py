"""What `streambed run` tells Prometheus, and its health checks (docs/metrics.md).

- `lag`: the replication lag in seconds, from the commits read and flushed (pure).
- `replication`: the replication process's metrics (pipeline, lake, slot, copies), fed by
  the components it is handed to.
- `query`: the query server's metrics, kept by its child process in files the parent reads
  (`children`).
- `health`: what /readyz answers.
- `http`: the endpoint (/metrics, /healthz, /readyz), on threads of its own.
"""
