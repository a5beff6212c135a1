"""DingTalk: the platform adapter (adapter) over DingTalk's OpenAPI (api)."""
