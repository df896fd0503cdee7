"""Start a run, stream it, approve the action it asks for, stream it to the end.

pip install tether-client
TETHER_GRPC_TARGET=127.0.0.1:50051 TETHER_TOKEN=<a user's token> python client_quickstart.py
(after `make run`, `. .tether/env` sets both)
"""

import asyncio
import os

from tether_client import TetherClient


async def main() -> None:
    target, token = os.environ["TETHER_GRPC_TARGET"], os.environ["TETHER_TOKEN"]
    async with TetherClient(target, token=token) as client:
        conversation = await client.create_conversation("quickstart")
        run = await client.start(conversation.id, "restart payment-api-2 in prod")
        # One loop to the end: it reconnects by itself and stops after done/error/cancelled.
        async for event in client.stream(run.id):
            kind = event.WhichOneof("event")
            if kind == "text_delta":
                print(event.text_delta.delta, end="", flush=True)
            elif kind == "interrupt":
                print(f"Approving: {event.interrupt.payload.title}")
                await client.approve(run.id, event.interrupt.interrupt_id)
            elif kind in ("done", "error", "cancelled"):
                print(f"\n[{kind}]")


asyncio.run(main())
