"""The official LangGraph client, unchanged, on Tether: stream a run to its interrupt, resume it.

pip install langgraph-sdk
TETHER_URL=http://127.0.0.1:8080 TETHER_TOKEN=<a user's token> python langgraph_quickstart.py
(after `make run`, `. .tether/env` sets both)
"""

import asyncio
import os

from langgraph_sdk import get_client

MODES = ["values", "updates", "messages-tuple"]


async def main() -> None:
    client = get_client(
        url=f"{os.environ['TETHER_URL']}/langgraph",
        headers={"Authorization": f"Bearer {os.environ['TETHER_TOKEN']}"},
    )
    thread = await client.threads.create()
    ask = {"messages": [{"role": "user", "content": "restart payment-api-2 in prod"}]}
    stream = client.runs.stream(thread["thread_id"], "opspilot", input=ask, stream_mode=MODES)
    while True:
        async for part in stream:
            if part.event == "messages":
                print(part.data[0]["content"], end="", flush=True)
            elif part.event == "updates" and "__interrupt__" in part.data:
                print(f"\nApproving: {part.data['__interrupt__'][0]['value']['title']}")
        # The stream ends at an interrupt (that run is over: `success`), or at the end.
        if (await client.threads.get(thread["thread_id"]))["status"] != "interrupted":
            break
        stream = client.runs.stream(
            thread["thread_id"], "opspilot", command={"resume": True}, stream_mode=MODES
        )
    print(f"\n[{(await client.runs.list(thread['thread_id']))[0]['status']}]")


asyncio.run(main())
