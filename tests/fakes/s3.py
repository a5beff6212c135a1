"""An S3-compatible object store on loopback: moto's server, for the file-store tests."""

from __future__ import annotations

from tests.conftest import free_port


class S3Server:
    """moto's S3 in server mode on a loopback port; stop() and start() it to play an
    outage (moto keeps the buckets in this process meanwhile)."""

    def __init__(self) -> None:
        self.port = free_port()
        self.endpoint = f"http://127.0.0.1:{self.port}"
        self.server = None

    def start(self) -> None:
        from moto.server import ThreadedMotoServer
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()

    def stop(self) -> None:
        self.server.stop()
