"""Chat: one platform-agnostic core (receive, commands, notifier, sender) and the thin
platform adapters over it (slack, dingtalk, terminal)."""
