"""The application layer: submit, cancel, retry, pause, resume and schedule, each with
its permission checks, written once for chat, the REST API, the CLI and the scheduler."""
