"""Unit tests of the streaming subresources' pure parts: the apiserver's container checks, the
error channel's Status, and the SPDY/3.1 framing kubectl port-forward tunnels (no server)."""

from __future__ import annotations

import json
import struct
import zlib

import pytest

from kfp_ray_sandbox.apiserver import podexec, spdy, streams
from kfp_ray_sandbox.apiserver.errors import ApiError


def _pod(*names, inits=(), node="sandbox-node"):
    return {"metadata": {"name": "p"}, "spec": {"containers": [{"name": n} for n in names],
                                                 "initContainers": [{"name": n} for n in inits], "nodeName": node}}


def test_container_is_checked_as_the_pod_registry_does():
    assert streams.container_of(_pod("ray"), {}) == "ray"
    with pytest.raises(ApiError) as many:
        streams.container_of(_pod("ray-head", "proxy", inits=("create-cert",)), {})
    assert many.value.status()["message"] == ("a container name must be specified for pod p, choose one of: "
                                              "[ray-head proxy] or one of the init containers: [create-cert]")
    with pytest.raises(ApiError) as unknown:
        streams.container_of(_pod("ray"), {"container": ["nope"]})
    assert unknown.value.code == 400 and unknown.value.status()["message"] == "container nope is not valid for pod p"
    with pytest.raises(ApiError) as unbound:
        streams.container_of(_pod("ray", node=""), {})
    assert unbound.value.status()["message"] == "pod p does not have a host assigned"


def test_error_channel_status_carries_the_exit_code_as_clients_read_it():
    assert json.loads(podexec.status_json(0, ["true"])) == {"metadata": {}, "status": "Success"}
    failed = json.loads(podexec.status_json(3, ["false"]))
    assert failed["status"] == "Failure" and failed["reason"] == "NonZeroExitCode"
    assert failed["details"]["causes"] == [{"reason": "ExitCode", "message": "3"}]


def test_spdy_dictionary_is_spdy3s():
    assert len(spdy.DICTIONARY) == 1423 and zlib.adler32(spdy.DICTIONARY) == 0xE3C6A7C2


def test_spdy_frames_split_across_messages_and_shared_header_contexts():
    client = zlib.compressobj(9, zdict=spdy.DICTIONARY)  # as spdystream's framer compresses

    def syn(stream_id, **headers):
        raw = struct.pack("!I", len(headers)) + b"".join(
            struct.pack("!I", len(k)) + k.encode() + struct.pack("!I", len(v)) + v.encode() for k, v in headers.items())
        block = client.compress(raw) + client.flush(zlib.Z_SYNC_FLUSH)
        return struct.pack("!HHI", 0x8003, spdy.SYN_STREAM, 10 + len(block)) + struct.pack("!IIBB", stream_id, 0, 0, 0) + block

    wire = (syn(1, streamtype="error", port="8265", requestid="0") + syn(3, streamtype="data", port="8265", requestid="0")
            + struct.pack("!II", 3, (spdy.FLAG_FIN << 24) | 2) + b"hi" + struct.pack("!HHII", 0x8003, spdy.PING, 4, 7))
    reader = spdy.Reader()
    frames = [f for i in range(0, len(wire), 5) for f in reader.feed(wire[i:i + 5])]
    assert [(f.type, f.stream_id) for f in frames] == [(spdy.SYN_STREAM, 1), (spdy.SYN_STREAM, 3), (0, 3), (spdy.PING, 0)]
    assert frames[1].headers == {"streamtype": ["data"], "port": ["8265"], "requestid": ["0"]}
    assert frames[2].data == b"hi" and frames[2].fin and frames[3].value == 7
    # what the server writes, read back by a decompressor as the client's framer has
    writer, inflate = spdy.Writer(), zlib.decompressobj(zdict=spdy.DICTIONARY)
    for stream_id in (1, 3):
        reply = writer.syn_reply(stream_id)
        assert struct.unpack_from("!HHI", reply)[:2] == (0x8003, spdy.SYN_REPLY)
        assert inflate.decompress(reply[12:]) == b"\0\0\0\0"  # no headers
    assert writer.data(3, b"", fin=True) == struct.pack("!II", 3, spdy.FLAG_FIN << 24)


def test_what_is_refused_before_any_upgrade():
    websocket = {"Connection": "Upgrade", "Upgrade": "websocket", "Sec-WebSocket-Protocol": "v5.channel.k8s.io"}
    spdy_ = {"Connection": "Upgrade", "Upgrade": "SPDY/3.1"}
    for sub, headers, query, code, text in (
            ("attach", websocket, {}, 400, "does not attach"),
            ("exec", {**spdy_, "X-Stream-Protocol-Version": "v3.channel.k8s.io,channel.k8s.io"}, {}, 403,
             "unable to negotiate protocol: client supports ['v3.channel.k8s.io', 'channel.k8s.io']"),
            ("exec", {}, {}, 400, "Upgrade request required"),
            ("exec", websocket, {"stdout": ["false"], "stderr": ["false"]}, 400, "at least 1 of stdin, stdout, stderr"),
            ("exec", websocket, {}, 400, "at least one command"),
            ("portforward", {**websocket, "Sec-WebSocket-Protocol": "v4.channel.k8s.io"}, {"ports": ["x"]}, 400,
             'unable to parse "x" as a port')):
        with pytest.raises(ApiError) as refused:
            streams.prepare(None, sub, _pod("ray"), query, headers)
        assert refused.value.code == code and text in refused.value.status()["message"], (sub, refused.value.status())
