"""The sandbox's S3: moto's real HTTP S3 server on loopback, standing in for MinIO.

Clients reach it only through an endpoint URL and credentials, as they reach MinIO
through an RHOAI data connection (path-style addressing, plain http).
"""

from __future__ import annotations

import logging
import secrets
import threading


class S3Server:
    def __init__(self, host: str = "127.0.0.1", region: str = "us-east-1", faults=None):
        """faults: the sandbox's Faults, whose "s3" section holds requests (faults.py)."""
        self.host, self.region, self.faults = host, region, faults
        self.access_key = "sandbox" + secrets.token_hex(6)
        self.secret_key = secrets.token_urlsafe(24)
        self._server = None
        self._stopping = threading.Event()

    def start(self) -> None:
        # moto logs every request through werkzeug, even with verbose=False.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        from moto.server import ThreadedMotoServer

        server = self

        class Served(ThreadedMotoServer):
            """moto's server, its WSGI app behind the S3 faults (moto 5: _server_entry's make_server)."""

            def _server_entry(self) -> None:
                from moto.server import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
                from werkzeug.serving import make_server

                app = DomainDispatcherApplication(create_backend_app)
                self._server = make_server(self._ip_address, self._port, server._faulted(app), True,
                                           request_handler=MotoRequestHandler)
                self._server_ready_event.set()
                self._server.serve_forever()

        self._server = Served(ip_address=self.host, port=0, verbose=False)
        self._server.start()

    def _faulted(self, app):
        def serve(environ, start_response):
            path = (environ.get("PATH_INFO") or "").lstrip("/")
            if self.faults is not None and self.faults.hold_s3(path, self._stopping):
                start_response("503 Slow Down", [("Content-Type", "application/xml")])
                return [b"<?xml version='1.0' encoding='UTF-8'?><Error><Code>SlowDown</Code><Message>held by the "
                        b"sandbox's s3 hold fault</Message></Error>"]
            return app(environ, start_response)

        return serve

    @property
    def endpoint(self) -> str:
        host, port = self._server.get_host_and_port()
        return f"http://{host}:{port}"

    def client(self):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name=self.region,
                            config=Config(s3={"addressing_style": "path"}))

    def create_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def stop(self) -> None:
        self._stopping.set()  # held requests are answered
        if self._server is not None:
            self._server.stop()
            self._server = None
