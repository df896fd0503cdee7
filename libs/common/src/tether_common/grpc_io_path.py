"""Which threads carry gRPC's socket I/O in Tether's processes: grpc.aio's completion-queue poller
itself (gRPC core's iomgr), not the EventEngine's thread pool. Importing this module chooses it;
each entry point imports it before anything imports grpc (`tether_cli.main`, `python -m
tether_runtime`, the tests' fork server, so that the services the tests start run as deployed).

grpcio 1.85 reads and writes a connection's socket on the EventEngine's threads (its
`event_engine_client` and `event_engine_listener` experiments, on by default). In a grpc.aio
process every completion then crosses three threads: an EventEngine thread reads the socket and
hands the completion over, grpc.aio's poller thread takes it and writes a byte to wake the event
loop (tether_common.grpc_poller), the loop handles it. On iomgr the poller thread reads the
socket itself: one thread hop and two wake-ups fewer per completion, of which a short run makes
about eight on each side of the gateway-runtime stream. Measured (`make bench ARGS="--only
short_runs"`, `<process>_switches_per_run`, medians of five runs each way): the gateway's
context switches per short run 29.3 -> 13.7 and its CPU per run -9 to -13 %, the runtime's
switches 22.5 -> 18.3 (bench/README.md, "gRPC's I/O on its poller thread").

gRPC core reads GRPC_EXPERIMENTS once, when `grpc` is imported: set later, it changes nothing
(tests/integration/test_grpc_io_path.py checks the serving processes). An operator's own
GRPC_EXPERIMENTS is left as it is. A grpcio release that makes these experiments permanent
ignores the setting (the same test then fails, telling whoever upgrades that the hop is back)."""

from __future__ import annotations

import os

EXPERIMENTS = "-event_engine_client,-event_engine_listener"
"""gRPC core's experiments turned off: its EventEngine clients and listeners (grpc's own names)."""

os.environ.setdefault("GRPC_EXPERIMENTS", EXPERIMENTS)
