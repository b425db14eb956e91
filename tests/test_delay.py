"""FixedDelay behaves as trio.sleep(seconds): exact end times, FIFO, cancellation."""

from __future__ import annotations

import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from taketurns._models.delay import FixedDelay


async def test_each_wait_ends_exactly_its_length_after_it_began(autojump_clock) -> None:
    delay = FixedDelay(1.0)
    ends: dict[int, float] = {}

    async def one(i: int, start: float) -> None:
        await trio.sleep(start)
        await delay.wait()
        ends[i] = trio.current_time()

    starts = [0.0, 0.0, 0.25, 0.5, 0.5, 2.0, 2.1]
    base = trio.current_time()
    with trio.fail_after(100):  # a lost wake-up fails at once (autojump clock)
        async with trio.open_nursery() as nursery:
            for i, start in enumerate(starts):
                nursery.start_soon(one, i, start)
    assert {i: end - base for i, end in ends.items()} == {
        i: pytest.approx(start + 1.0) for i, start in enumerate(starts)
    }


async def test_a_wait_is_a_checkpoint_that_can_be_cancelled(autojump_clock) -> None:
    delay = FixedDelay(5.0)
    with trio.move_on_after(1.0) as scope:
        await delay.wait()
    assert scope.cancelled_caught
    with trio.CancelScope() as scope:
        scope.cancel()
        await delay.wait()
    assert scope.cancelled_caught
    start = trio.current_time()
    await delay.wait()  # the timer was handed on: a later wait still works
    assert trio.current_time() - start == pytest.approx(5.0)


async def test_cancelling_the_timer_holder_hands_the_timer_on(autojump_clock) -> None:
    delay = FixedDelay(1.0)
    done: list[tuple[str, float]] = []
    base = trio.current_time()

    async def waiter(name: str, after: float) -> None:
        await trio.sleep(after)
        await delay.wait()
        done.append((name, trio.current_time() - base))

    with trio.fail_after(100):
        await _hand_on(delay, waiter)
    assert done == [("b", pytest.approx(1.1)), ("c", pytest.approx(1.2))]


async def _hand_on(delay: FixedDelay, waiter) -> None:
    async with trio.open_nursery() as nursery:
        keeper = trio.CancelScope()
        nursery.start_soon(_in_scope, keeper, delay)  # the first waiter holds the timer
        nursery.start_soon(waiter, "b", 0.1)
        nursery.start_soon(waiter, "c", 0.2)
        await trio.sleep(0.5)
        keeper.cancel()
        await trio.sleep(0.65)


async def _in_scope(scope: trio.CancelScope, delay: FixedDelay) -> None:
    with scope:
        await delay.wait()
        raise AssertionError("the keeper's wait should have been cancelled")


def test_one_delay_serves_successive_runs() -> None:
    delay = FixedDelay(0.01)

    async def main() -> None:
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(delay.wait)

    for _ in range(3):
        trio.run(main)


def test_seconds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="seconds > 0"):
        FixedDelay(0)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 4000),  # start, ms
            st.one_of(st.none(), st.integers(0, 4000)),  # cancelled after, ms
        ),
        min_size=1,
        max_size=25,
    )
)
def test_waits_end_on_time_whatever_is_cancelled(plan: list[tuple[int, int | None]]) -> None:
    """Random arrivals and cancellations (of keepers and of waiters alike): every wait
    that is not cancelled ends exactly ``seconds`` after it began, and every cancelled
    one ends at its cancellation."""
    seconds = 1.5
    results: dict[int, tuple[str, float]] = {}

    async def one(i: int, start: int, cancel_after: int | None) -> None:
        await trio.sleep(start / 1000)
        began = trio.current_time()
        with trio.move_on_after(cancel_after / 1000 if cancel_after is not None else 1e9) as s:
            await delay.wait()
        results[i] = ("cancelled" if s.cancelled_caught else "done", trio.current_time() - began)

    async def main() -> None:
        with trio.fail_after(1000):  # a lost wake-up fails at once (autojump clock)
            async with trio.open_nursery() as nursery:
                for i, (start, cancel_after) in enumerate(plan):
                    nursery.start_soon(one, i, start, cancel_after)

    delay = FixedDelay(seconds)
    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    for i, (_, cancel_after) in enumerate(plan):
        kind, took = results[i]
        if cancel_after is not None and cancel_after / 1000 < seconds:
            assert (kind, took) == ("cancelled", pytest.approx(cancel_after / 1000)), i
        elif cancel_after is None or cancel_after / 1000 > seconds:
            assert (kind, took) == ("done", pytest.approx(seconds)), i
