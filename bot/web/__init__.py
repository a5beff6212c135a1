"""The web surface in `genbot serve`'s app: the REST API, its OpenAPI document, the
dashboard (static/ holds its page) with its sessions, and /metrics.

The API is one module per resource (queue, workers, templates, batches, jobs, events,
schedules), each declaring its routes with the records they answer (routes, http);
api assembles them with who is asking (callers) and the error middleware, and openapi
generates the document from the same declarations."""
