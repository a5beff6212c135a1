"""The web surface in `genbot serve`'s app: the REST API, its OpenAPI document, the
dashboard (static/ holds its page) with its sessions, and /metrics."""
