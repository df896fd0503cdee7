"""The one backoff policy: pauses grow from the first by the multiplier, never past the cap,
jittered within their range, and a deadline ends the retries without a pause past it. Clock,
sleep and random are injected: no test here waits on the wall clock."""

from __future__ import annotations

import math
import random

import pytest
from tether_common.backoff import FULL_JITTER, HALF_JITTER, NO_JITTER, Backoff, Retries


class FakeClock:
    """A monotonic clock that only a sleep moves, and the sleeps it was asked for."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def __call__(self) -> float:
        return self.now

    async def sleep(self, delay: float) -> None:
        self.slept.append(delay)
        self.now += delay


def clock() -> FakeClock:
    return FakeClock()


def test_without_jitter_pauses_double_from_the_first_up_to_the_cap() -> None:
    policy = Backoff(0.1, 2.0, jitter=NO_JITTER)
    assert [policy.delay(n) for n in range(1, 8)] == pytest.approx(
        [0.1, 0.2, 0.4, 0.8, 1.6, 2.0, 2.0]
    )
    assert policy.delay(0) == policy.delay(1)  # "no failure yet" reads as the first


def test_the_multiplier_sets_the_growth() -> None:
    policy = Backoff(1.0, jitter=NO_JITTER, multiplier=3.0)
    assert [policy.delay(n) for n in (1, 2, 3)] == [1.0, 3.0, 9.0]


@pytest.mark.parametrize(
    ("jitter", "low", "high"),
    [(FULL_JITTER, 0.0, 1.0), (HALF_JITTER, 0.5, 1.0), ((0.5, 1.5), 0.5, 1.5)],
)
def test_jitter_stays_within_its_range_of_the_pause(
    jitter: tuple[float, float], low: float, high: float
) -> None:
    policy = Backoff(1.0, 100.0, jitter=jitter)
    rng = random.Random(7)
    for n in (1, 2, 3, 4):
        window = 2.0 ** (n - 1)
        waits = {policy.delay(n, rng.uniform) for _ in range(200)}
        assert all(low * window <= w <= high * window for w in waits), (n, waits)
        assert len(waits) > 100  # spread, not one value
        assert min(waits) < (low + 0.1 * (high - low)) * window  # reaches near both ends
        assert max(waits) > (high - 0.1 * (high - low)) * window


def test_the_random_factor_is_the_one_drawn() -> None:
    policy = Backoff(0.2, 10.0, jitter=HALF_JITTER)
    assert policy.delay(3, lambda lo, hi: lo) == pytest.approx(0.4)
    assert policy.delay(3, lambda lo, hi: hi) == pytest.approx(0.8)


def test_a_jitter_factor_above_one_never_passes_the_cap() -> None:
    policy = Backoff(1.0, 10.0, jitter=(0.5, 1.5))
    assert policy.delay(4, lambda lo, hi: hi) == 10.0  # 8 * 1.5 = 12, capped
    assert policy.delay(50, lambda lo, hi: lo) == 5.0  # the cap, jittered down


def test_a_loop_that_fails_forever_does_not_overflow() -> None:
    assert Backoff(0.1, 0.5, jitter=NO_JITTER).delay(100_000) == 0.5
    assert Backoff(0.1, jitter=NO_JITTER).delay(100_000) == math.inf


@pytest.mark.parametrize(
    "kwargs",
    [
        {"first_s": -1.0},
        {"first_s": 1.0, "cap_s": -1.0},
        {"first_s": 1.0, "multiplier": 0.5},
        {"first_s": 1.0, "jitter": (1.0, 0.5)},
        {"first_s": 1.0, "jitter": (-0.1, 1.0)},
    ],
)
def test_nonsense_is_refused(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="not a backoff"):
        Backoff(**kwargs)  # type: ignore[arg-type]


async def test_retries_pause_with_the_policy_and_stop_at_the_deadline() -> None:
    c = clock()
    retries = Retries(Backoff(0.1, 0.4, jitter=NO_JITTER), 1.0, clock=c, sleep=c.sleep)
    while await retries.pause():
        pass
    # 0.1 + 0.2 + 0.4 = 0.7; then 0.3 is all that is left of the window: never past it.
    assert c.slept == pytest.approx([0.1, 0.2, 0.4, 0.3])
    assert c.now == pytest.approx(1001.0)
    assert retries.failures == 4
    assert await retries.pause() is False and retries.next_delay() is None


async def test_reset_starts_the_pauses_and_the_window_again() -> None:
    c = clock()
    retries = Retries(Backoff(0.1, jitter=NO_JITTER), 0.5, clock=c, sleep=c.sleep)
    assert await retries.pause() and await retries.pause()
    c.now += 10  # a long success: the window would be long spent
    retries.reset()
    assert retries.failures == 0
    assert await retries.pause()
    assert c.slept == pytest.approx([0.1, 0.2, 0.1])


async def test_without_a_deadline_retries_never_give_up() -> None:
    c = clock()
    retries = Retries(Backoff(0.05, 0.25, jitter=HALF_JITTER), clock=c, sleep=c.sleep)
    for _ in range(1000):
        assert await retries.pause()
    assert all(0 < s <= 0.25 for s in c.slept)
    assert c.slept[0] <= 0.05  # the first pause is the first's, jittered


async def test_retries_use_the_injected_random() -> None:
    c = clock()
    policy = Backoff(1.0, jitter=FULL_JITTER)
    retries = Retries(policy, clock=c, sleep=c.sleep, rand=lambda lo, hi: (lo + hi) / 2)
    for _ in range(3):
        await retries.pause()
    assert c.slept == [0.5, 1.0, 2.0]


async def test_a_pause_within_a_callers_deadline() -> None:
    c = clock()
    policy = Backoff(1.0, jitter=NO_JITTER)
    await policy.pause(3, sleep=c.sleep)
    await policy.pause(3, left_s=1.5, sleep=c.sleep)
    await policy.pause(3, left_s=-2.0, sleep=c.sleep)  # the deadline has passed: no wait
    assert c.slept == [4.0, 1.5, 0.0]
