"""Decoding Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) to JSON objects.

client-go's typed clients send built-in objects as protobuf (`kubectl create namespace`,
`create configmap`, `create secret`, `create serviceaccount`, `auth can-i`'s access reviews,
typed deletes' DeleteOptions). The body is the k8s envelope: the magic b"k8s\\x00", then a
runtime.Unknown message {typeMeta{apiVersion, kind}, raw, contentEncoding, contentType} whose
`raw` is the object's message. This module is a small wire decoder driven by field tables
(number -> JSON name, type) read from the generated.proto files of k8s.io/api and
k8s.io/apimachinery v0.31 (sandbox/data/protobuf-core.json, see tools/refresh_crds.py), with the
well-known types turned into their JSON forms (Time -> RFC 3339, Quantity -> string,
IntOrString -> int or string, RawExtension/FieldsV1 -> embedded JSON, bytes -> base64).

The answer is JSON: client-go sends `Accept: application/vnd.kubernetes.protobuf,
application/json` and decodes whatever of those the server answers. A kind whose message is
not in the tables (a type this sandbox does not serve) cannot be decoded; `decode` raises
Unsupported and the server answers 415, where a real apiserver would accept the request.
"""

from __future__ import annotations

import base64
import json
import struct
from datetime import UTC, datetime
from functools import lru_cache

MAGIC = b"k8s\x00"
CONTENT_TYPE = "application/vnd.kubernetes.protobuf"
UNKNOWN = "k8s.io.apimachinery.pkg.runtime.Unknown"
META = "k8s.io.apimachinery.pkg.apis.meta.v1."

# apiVersion (group/version) -> the proto package its messages live in
PACKAGES = {"v1": "k8s.io.api.core.v1", "authorization.k8s.io/v1": "k8s.io.api.authorization.v1",
            "authentication.k8s.io/v1": "k8s.io.api.authentication.v1"}
# kinds every group version shares, in meta/v1
META_KINDS = ("DeleteOptions",)


class Unsupported(Exception):
    """The body is protobuf the sandbox cannot decode (answered 415)."""


class Malformed(Exception):
    """The body is not valid protobuf (answered 400, as the apiserver's decoder fails)."""


@lru_cache(maxsize=1)
def messages() -> dict:
    from .resources import DATA_DIR
    return json.loads((DATA_DIR / "protobuf-core.json").read_text())["messages"]


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise Malformed("unexpected EOF")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Malformed("varint overflow")


def fields(buf: bytes):
    """Yield (field number, wire type, value): int for varints/fixed, bytes for length-delimited."""
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise Malformed("unexpected EOF")
            value, pos = struct.unpack_from("<q", buf, pos)[0], pos + 8
        elif wire == 2:
            length, pos = _varint(buf, pos)
            if pos + length > len(buf):
                raise Malformed("unexpected EOF")
            value, pos = buf[pos:pos + length], pos + length
        elif wire == 5:
            if pos + 4 > len(buf):
                raise Malformed("unexpected EOF")
            value, pos = struct.unpack_from("<i", buf, pos)[0], pos + 4
        else:
            raise Malformed(f"unsupported wire type {wire}")
        yield num, wire, value


def _signed(value: int, bits: int = 64) -> int:
    return value - (1 << 64) if value >= 1 << (bits - 1) and value < 1 << 64 else value


def _scalar(typ: str, wire: int, value):
    if typ == "string":
        return value.decode("utf-8")
    if typ == "bytes":
        return base64.b64encode(value).decode()
    if typ == "bool":
        return bool(value)
    if typ in ("int32", "int64"):
        return _signed(value)
    if typ in ("uint32", "uint64", "fixed32", "fixed64"):
        return value
    if typ in ("sint32", "sint64"):
        return (value >> 1) ^ -(value & 1)
    if typ == "double":
        return struct.unpack("<d", struct.pack("<q", value))[0]
    if typ == "float":
        return struct.unpack("<f", struct.pack("<i", value))[0]
    raise Unsupported(f"protobuf scalar type {typ}")


def _time(buf: bytes, micro: bool = False) -> str | None:
    seconds = nanos = 0
    for num, _, value in fields(buf):
        if num == 1:
            seconds = _signed(value)
        elif num == 2:
            nanos = _signed(value)
    if not buf:
        return None  # metav1.Time marshals the zero time as an empty message
    t = datetime.fromtimestamp(seconds, tz=UTC)
    if micro:
        return t.strftime("%Y-%m-%dT%H:%M:%S") + f".{nanos // 1000:06d}Z"
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _special(typ: str, buf: bytes):
    """Well-known messages whose JSON form is not an object; (True, value) when `typ` is one."""
    if typ == META + "Time":
        return True, _time(buf)
    if typ == META + "MicroTime":
        return True, _time(buf, micro=True)
    if typ == "k8s.io.apimachinery.pkg.api.resource.Quantity":
        return True, next((v.decode() for n, _, v in fields(buf) if n == 1), "0")
    if typ == "k8s.io.apimachinery.pkg.util.intstr.IntOrString":
        kind, ival, sval = 0, 0, ""
        for n, _, v in fields(buf):
            if n == 1:
                kind = v
            elif n == 2:
                ival = _signed(v)
            elif n == 3:
                sval = v.decode()
        return True, (sval if kind == 1 else ival)
    if typ in ("k8s.io.apimachinery.pkg.runtime.RawExtension", META + "FieldsV1"):
        raw = next((v for n, _, v in fields(buf) if n == 1), b"")
        try:
            return True, json.loads(raw) if raw else {}
        except ValueError as exc:
            raise Unsupported(f"embedded {typ.rsplit('.', 1)[-1]} is not JSON") from exc
    if typ == META + "Duration":
        nanos = next((_signed(v) for n, _, v in fields(buf) if n == 1), 0)
        return True, f"{nanos / 1e9:g}s"
    if typ.endswith(".ExtraValue"):
        return True, [v.decode() for n, _, v in fields(buf) if n == 1]
    return False, None


def decode_message(typ: str, buf: bytes):
    """One message to its JSON value, as Go's JSON encoding of the decoded struct would write it
    (empty strings, being omitted by `omitempty`, are left out)."""
    special, value = _special(typ, buf)
    if special:
        return value
    table = messages().get(typ)
    if table is None:
        raise Unsupported(f"the sandbox has no protobuf field table for {typ}")
    out: dict = {}
    for num, wire, value in fields(buf):
        spec = table.get(str(num))
        if spec is None:
            raise Unsupported(f"field {num} of {typ} is not in the sandbox's protobuf field table")
        name, ftype, label = spec
        if label == "map":
            key = val = None
            for n, w, v in fields(value):
                if n == 1:
                    key = v.decode()
                elif n == 2:
                    val = _element(ftype, w, v)
            if val is None:
                val = "" if ftype in ("string", "bytes") else {}
            out.setdefault(name, {})[key or ""] = val
        elif label == "inline":  # an embedded Go struct: its fields are the outer object's
            out.update(decode_message(ftype, value))
        elif label == "repeated":
            if wire == 2 and ftype in _PACKABLE:  # packed scalars
                out.setdefault(name, []).extend(_unpack(ftype, value))
            else:
                out.setdefault(name, []).append(_element(ftype, wire, value))
        else:
            v = _element(ftype, wire, value)
            if v is None or v == "":
                out.pop(name, None)
            else:
                out[name] = v
    return out


_PACKABLE = {"int32", "int64", "uint32", "uint64", "bool", "sint32", "sint64", "double", "float", "fixed32",
             "fixed64"}


def _unpack(ftype: str, buf: bytes) -> list:
    out, pos = [], 0
    while pos < len(buf):
        if ftype in ("double", "fixed64"):
            out.append(_scalar(ftype, 1, struct.unpack_from("<q", buf, pos)[0]))
            pos += 8
        elif ftype in ("float", "fixed32"):
            out.append(_scalar(ftype, 5, struct.unpack_from("<i", buf, pos)[0]))
            pos += 4
        else:
            v, pos = _varint(buf, pos)
            out.append(_scalar(ftype, 0, v))
    return out


def _element(ftype: str, wire: int, value):
    if ftype in _PACKABLE or ftype in ("string", "bytes"):
        return _scalar(ftype, wire, value)
    return decode_message(ftype, value)


def unwrap(body: bytes) -> tuple[dict, bytes]:
    """The envelope: (typeMeta {apiVersion, kind}, raw object message)."""
    if not body.startswith(MAGIC):
        raise Malformed("provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]")
    type_meta: dict = {}
    raw = b""
    for num, _, value in fields(body[len(MAGIC):]):
        if num == 1:
            for n, _, v in fields(value):
                if n == 1:
                    type_meta["apiVersion"] = v.decode()
                elif n == 2:
                    type_meta["kind"] = v.decode()
        elif num == 2:
            raw = value
        elif num == 3 and value:
            raise Unsupported(f"content encoding {value.decode()!r}")
    return type_meta, raw


def message_type(api_version: str, kind: str) -> str:
    if kind in META_KINDS:
        return META + kind
    package = PACKAGES.get(api_version)
    if package is None:
        raise Unsupported(f"the sandbox cannot decode protobuf for {api_version}")
    return f"{package}.{kind}"


def decode(body: bytes) -> dict:
    """A protobuf request body (envelope and object) to the JSON object it encodes."""
    type_meta, raw = unwrap(body)
    kind, api_version = type_meta.get("kind", ""), type_meta.get("apiVersion", "")
    if not kind:
        raise Malformed("object kind is not set in the protobuf envelope")
    obj = decode_message(message_type(api_version, kind), raw)
    return {"apiVersion": api_version, "kind": kind, **obj}


# --- encoding: for tests (what client-go's protobuf serializer writes) ---------------------

def _key(num: int, wire: int) -> bytes:
    return _enc_varint(num << 3 | wire)


def _enc_varint(v: int) -> bytes:
    if v < 0:
        v += 1 << 64
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def encode_message(typ: str, value) -> bytes:
    """The inverse of decode_message, for the types tests send (no packed fields)."""
    if typ in (META + "Time", META + "MicroTime"):
        if not value:
            return b""
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
        return _key(1, 0) + _enc_varint(int(t.timestamp()))
    if typ == "k8s.io.apimachinery.pkg.api.resource.Quantity":
        return _len(1, str(value).encode())
    if typ == "k8s.io.apimachinery.pkg.util.intstr.IntOrString":
        if isinstance(value, str):
            return _key(1, 0) + _enc_varint(1) + _len(3, value.encode())
        return _key(1, 0) + _enc_varint(0) + _key(2, 0) + _enc_varint(value)
    if typ in ("k8s.io.apimachinery.pkg.runtime.RawExtension", META + "FieldsV1"):
        return _len(1, json.dumps(value).encode())
    if typ.endswith(".ExtraValue"):
        return b"".join(_len(1, v.encode()) for v in value)
    table = messages()[typ]
    by_name = {spec[0]: (int(num), spec[1], spec[2]) for num, spec in table.items()}
    out = bytearray()
    for num, ftype, label in by_name.values():
        if label == "inline":
            inner = {k: v for k, v in value.items() if k in {s[0] for s in messages()[ftype].values()}}
            if inner:
                out += _len(num, encode_message(ftype, inner))
    for name, v in value.items():
        if name in ("apiVersion", "kind") and name not in by_name:
            continue
        if name not in by_name:
            continue  # an inline struct's field, written above
        num, ftype, label = by_name[name]
        if label == "inline":
            continue
        if label == "map":
            for k, item in v.items():
                out += _len(num, _len(1, k.encode()) + _enc_element(2, ftype, item))
        elif label == "repeated":
            for item in v:
                out += _enc_element(num, ftype, item)
        else:
            out += _enc_element(num, ftype, v)
    return bytes(out)


def _len(num: int, data: bytes) -> bytes:
    return _key(num, 2) + _enc_varint(len(data)) + data


def _enc_element(num: int, ftype: str, v) -> bytes:
    if ftype == "string":
        return _len(num, v.encode())
    if ftype == "bytes":
        return _len(num, base64.b64decode(v))
    if ftype == "bool":
        return _key(num, 0) + _enc_varint(int(v))
    if ftype in ("int32", "int64", "uint32", "uint64"):
        return _key(num, 0) + _enc_varint(v)
    if ftype == "double":
        return _key(num, 1) + struct.pack("<d", v)
    return _len(num, encode_message(ftype, v))


def encode(obj: dict) -> bytes:
    """An object in the k8s protobuf envelope, as client-go sends it."""
    typ = message_type(obj["apiVersion"], obj["kind"])
    type_meta = _len(1, obj["apiVersion"].encode()) + _len(2, obj["kind"].encode())
    return MAGIC + _len(1, type_meta) + _len(2, encode_message(typ, obj))
