"""Outgoing webhooks: other systems told of batches and jobs by signed POSTs.

The announcer (event log -> deliveries owed, in the outbox) and the deliverer (owed ->
signed, posted, retried) run in `genbot serve` beside the chat's notifier and senders;
payloads are the typed records every delivery carries, endpoints where they go. The
service ties them together and offers the admin's actions (docs/webhooks.md).
"""
