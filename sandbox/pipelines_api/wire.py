"""Bodies as kfp_server_api (the client generated from KFP's API spec, 2.17.3) reads and writes
them: responses are built as its models and serialized with its own ApiClient, so a field name
or type the client would not read cannot leave the server (e.g. `recurringRuns`, the one
camelCase key); requests are read into its models, so a body the client could not have sent
is refused. Errors have grpc-gateway's shape: {"error", "code", "message", "details"} (the
DSP fork of RHOAI 2.x adds "error"; the client never parses error bodies)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from functools import cache

# grpc status codes and the HTTP status grpc-gateway answers for each
GRPC = {"INVALID_ARGUMENT": (3, 400), "NOT_FOUND": (5, 404), "ALREADY_EXISTS": (6, 409),
        "FAILED_PRECONDITION": (9, 400), "UNAUTHENTICATED": (16, 401), "PERMISSION_DENIED": (7, 403),
        "INTERNAL": (13, 500), "UNIMPLEMENTED": (12, 501)}


class ApiError(Exception):
    def __init__(self, status: str, message: str):
        super().__init__(message)
        self.grpc, self.http = GRPC[status]
        self.message = message

    def body(self) -> dict:
        short = self.message.split(": ")[-1]
        return {"error": self.message, "code": self.grpc, "message": self.message,
                "details": [{"@type": "type.googleapis.com/google.rpc.Status", "code": self.grpc, "message": short}]}


def invalid(message: str) -> ApiError:
    return ApiError("INVALID_ARGUMENT", message)


def not_found(kind: str, key: str) -> ApiError:
    return ApiError("NOT_FOUND", f"Failed to get {kind}: ResourceNotFoundError: {kind} {key} not found")


def already_exists(action: str, kind: str, name: str) -> ApiError:
    return ApiError("ALREADY_EXISTS", f"Failed to {action}: AlreadyExistsError: {kind} with name {name} already exists")


@cache
def _client():
    import kfp_server_api

    return kfp_server_api.ApiClient(kfp_server_api.Configuration())


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")  # microseconds: list order within a second


def to_json(model: str, fields: dict) -> dict:
    """`fields` (snake_case, as the model's attributes) through kfp_server_api's model `model`
    (e.g. "V2beta1Pipeline") and back out as the JSON the client reads."""
    import kfp_server_api

    cls = getattr(kfp_server_api, model)
    unknown = set(fields) - set(cls.openapi_types)
    if unknown:
        raise AssertionError(f"{model} has no fields {sorted(unknown)}")
    obj = cls(**{k: v for k, v in fields.items() if v is not None}, local_vars_configuration=_client().configuration)
    return _client().sanitize_for_serialization(obj)


def from_json(model: str, body: bytes) -> object:
    """The request body read into kfp_server_api's `model`; 400 if it is not JSON or not that."""
    try:
        data = json.loads(body or b"{}")
    except ValueError as exc:
        raise invalid(f"Failed to parse the request body: {exc}") from None
    if not isinstance(data, dict):
        raise invalid("Failed to parse the request body: not a JSON object")

    class _Response:  # what ApiClient.deserialize reads
        pass

    response = _Response()
    response.data = json.dumps(data)
    try:
        return _client().deserialize(response, model)
    except (ValueError, TypeError) as exc:
        raise invalid(f"Failed to parse the request body as {model}: {exc}") from None


def read(model: str, body: bytes) -> dict:
    """The request body as kfp_server_api's `model` reads it (from_json), back as a dict of
    the fields it set."""
    return {k: v for k, v in from_json(model, body).to_dict().items() if v is not None}
