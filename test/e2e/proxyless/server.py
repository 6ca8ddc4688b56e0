"""Proxyless (xDS-enabled) gRPC server on gRPC C-core (grpcio) for test/e2e.

Usage: GRPC_XDS_BOOTSTRAP=FILE python3 server.py PORT

Serves grpc.testing.TestService/UnaryCall (an empty SimpleResponse) on
127.0.0.1:PORT as an xDS server: it serves once its inbound listener
arrives over xDS, and enforces that listener's RBAC filters. It prints
"started" once the port is bound and runs until killed.
"""

import sys
from concurrent import futures

import grpc

METHOD = "/grpc.testing.TestService/UnaryCall"


class Handler(grpc.GenericRpcHandler):
    def service(self, details):
        if details.method == METHOD:
            return grpc.unary_unary_rpc_method_handler(lambda request, context: b"")
        return None


def main():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4), xds=True)
    server.add_generic_rpc_handlers((Handler(),))
    server.add_insecure_port("127.0.0.1:" + sys.argv[1])
    server.start()
    print("started", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
