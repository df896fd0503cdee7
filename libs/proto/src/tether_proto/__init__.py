"""tether-proto: Tether's wire API. The generated protobuf/gRPC code is `tether.runtime.v1`
(built from proto/ by `make gen` and by this package's wheel build); `tether_proto.wire` holds the
wire's enum names and terminal values, read from it."""
