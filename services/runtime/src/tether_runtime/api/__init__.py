"""The gRPC API: the servicer (authenticate, translate, call the engine, map errors) and one module per API area."""
