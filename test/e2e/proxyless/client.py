"""Proxyless gRPC client on gRPC C-core (grpcio) for test/e2e.

Usage: GRPC_XDS_BOOTSTRAP=FILE python3 client.py TARGET PHASES_JSON

PHASES_JSON is a list of {"n": RPCS, "metadata": [[KEY, VALUE], ...]}. The
script sends each phase's unary grpc.testing.TestService/UnaryCall RPCs
over one xds:///TARGET channel and prints one JSON line: a list, per phase,
of {BACKEND_HOSTNAME: COUNT}. Requests and responses stay raw bytes (no
generated stubs): the empty request is an empty SimpleRequest, and only
SimpleResponse.hostname (field 6) is read from the answer.
"""

import json
import sys

import grpc

METHOD = "/grpc.testing.TestService/UnaryCall"
HOSTNAME_FIELD = 6


def varint(buf, i):
    """Returns the varint at buf[i:] and the index after it."""
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, i
        shift += 7


def hostname(buf):
    """Returns SimpleResponse.hostname from its wire bytes."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            _, i = varint(buf, i)
        elif wire == 1:
            i += 8
        elif wire == 5:
            i += 4
        elif wire == 2:
            size, i = varint(buf, i)
            if field == HOSTNAME_FIELD:
                return buf[i:i + size].decode()
            i += size
        else:
            raise ValueError("unsupported wire type %d" % wire)
    return ""


def main():
    target, phases = sys.argv[1], json.loads(sys.argv[2])
    with grpc.insecure_channel("xds:///" + target) as channel:
        call = channel.unary_unary(METHOD)
        out = []
        for phase in phases:
            counts = {}
            md = [tuple(kv) for kv in phase.get("metadata") or []]
            for _ in range(phase["n"]):
                raw = call(b"", metadata=md, timeout=20, wait_for_ready=True)
                name = hostname(raw)
                counts[name] = counts.get(name, 0) + 1
            out.append(counts)
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
