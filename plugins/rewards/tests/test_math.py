"""Golden cases of the math reward, including answers that make sympy hang."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest

from videorl.api import RewardInput, RewardRouter
from videorl.testing import assert_reward_contract
from videorl_rewards.mathematics import MathReward

HANG = "<answer>9^{9^{9^{9}}}</answer>"  # sympy evaluates the tower for minutes


def case(response: str, expected: float, truth: str = "\\frac{1}{2}") -> tuple[RewardInput, float]:
    return RewardInput(response, "math", truth, sample_id="m"), expected


@pytest.fixture(scope="module")
def reward() -> Iterator[MathReward]:
    r = MathReward(timeout=3.0)
    yield r
    r.close()


def test_golden_cases(reward: MathReward) -> None:
    cases = [
        case("<answer>0.5</answer>", 1.0),
        case("<answer>1/2</answer>", 1.0),
        case("<answer>\\frac{2}{4}</answer>", 1.0),
        case("<answer>0.6</answer>", 0.1),
        case("", 0.0),
        case("So \\boxed{\\frac{1}{2}}", 0.9),  # untagged: the boxed answer, format 0
        case("<answer>(x+1)^2</answer>", 1.0, truth="x^2+2x+1"),
        case("<answer>" + "1" * 5000 + "</answer>", 0.05),  # too long to be an answer
        case("<answer>0.5</answer><answer>7</answer>", 0.1),
        case("<answer>$\\frac{1}{2}$</answer>", 1.0),
        case("<answer>\\{1,2\\}</answer>", 1.0, truth="\\{2,1\\}"),
        case(HANG, 0.1, truth="1"),  # killed or interrupted: accuracy 0
    ]
    assert_reward_contract(reward, cases)


def test_a_hang_is_killed_within_the_timeout() -> None:
    reward = MathReward(timeout=1.0, sympy_timeout=0)  # no signal timeouts: only the kill can stop it
    try:
        reward(case("<answer>1</answer>", 1.0, truth="1")[0])  # start the worker
        start = time.monotonic()
        out = reward(case(HANG, 0.1, truth="1")[0])
        assert time.monotonic() - start < 2.0
        assert out is not None and out.parts == {"accuracy": 0.0, "format": 1.0, "timeout": 1.0}
        out = reward(case("<answer>2</answer>", 1.0, truth="2")[0])  # a fresh worker takes over
        assert out is not None and out.score == 1.0
    finally:
        reward.close()


@pytest.mark.slow
def test_a_batch_with_hangs_finishes_within_its_timeouts() -> None:
    reward = MathReward(timeout=1.0, sympy_timeout=0, processes=2)
    router = RewardRouter.of({"math": reward})
    inputs = [case(HANG if i % 4 == 0 else "<answer>0.5</answer>", 0)[0] for i in range(8)]
    try:
        start = time.monotonic()
        outs = router.score(inputs)
        elapsed = time.monotonic() - start
    finally:
        reward.close()
    assert [o.score for o in outs if o] == [0.1, 1.0, 1.0, 1.0, 0.1, 1.0, 1.0, 1.0]
    assert elapsed < 2 * 1.0 + 2 * 3.0  # two hangs of 1 s on two workers, plus worker restarts


@pytest.mark.slow
def test_a_worker_killed_or_stopped_from_outside_does_not_cost_the_reward() -> None:
    """Whatever signals the worker (a hostile program that reached it, the OOM killer): a killed worker
    is replaced and the check retried, a stopped one is killed at the timeout, and the next checks work."""
    reward = MathReward(timeout=2.0, processes=1)
    try:
        assert reward.verify("\\frac{1}{2}", "0.5")
        (worker,) = reward._workers
        os.kill(worker.proc.pid, signal.SIGKILL)
        worker.proc.wait()
        assert reward.verify("\\frac{1}{2}", "0.5")  # the same answer, right, on a new worker
        assert not reward.verify("\\frac{1}{2}", "0.6")
        (worker,) = reward._workers
        os.kill(worker.proc.pid, signal.SIGSTOP)
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            reward.verify("1", "1")
        assert time.monotonic() - start < 2.0 + 1.0
        assert worker.proc.poll() is not None  # killed, not left stopped
        assert reward.verify("1", "1")
    finally:
        reward.close()
