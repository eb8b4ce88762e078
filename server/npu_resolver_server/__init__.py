"""gRPC server for the resolver."""
