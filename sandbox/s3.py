"""The sandbox's S3: moto's real HTTP S3 server on loopback, standing in for MinIO.

Clients reach it only through an endpoint URL and credentials, as they reach MinIO
through an RHOAI data connection (path-style addressing, plain http).
"""

from __future__ import annotations

import logging
import secrets


class S3Server:
    def __init__(self, host: str = "127.0.0.1", region: str = "us-east-1"):
        self.host, self.region = host, region
        self.access_key = "sandbox" + secrets.token_hex(6)
        self.secret_key = secrets.token_urlsafe(24)
        self._server = None

    def start(self) -> None:
        # moto logs every request through werkzeug, even with verbose=False.
        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        from moto.server import ThreadedMotoServer

        self._server = ThreadedMotoServer(ip_address=self.host, port=0, verbose=False)
        self._server.start()

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
        if self._server is not None:
            self._server.stop()
            self._server = None
