from tether_testkit.client import Client, token, types, assert_dense
from tether_testkit.secrets import TEST_SECRET


async def test_restart_flow(runtime):
    c = Client(runtime.addr, token(TEST_SECRET, "alice"))
    conv = await c.conversation()
    run = (await c.start(conv, "restart the abnormal payment-api instance")).run
    evs = await c.events(run.id, until="interrupt")
    print(types(evs))
    intr = evs[-1].interrupt
    await c.resume(run.id, intr.interrupt_id)
    rest = await c.events(run.id, after=evs[-1].sequence)
    print(types(rest))
    assert_dense(evs + rest)
    await c.close()
