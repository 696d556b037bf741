"""Golden cases of the open-ended reward: mean ROUGE-1/2/L F1 (0.9·accuracy + 0.1·format)."""

from __future__ import annotations

from videorl.api import RewardInput
from videorl.testing import assert_reward_contract
from videorl_rewards.open_ended import OpenEndedReward

TRUTH = "the cat sat on the mat"  # tokens: the cat sat on the mat; bigrams: 5


def case(response: str, expected: float, truth: str = TRUTH) -> tuple[RewardInput, float]:
    return RewardInput(response, "free-form", truth, sample_id="o"), expected


def f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r)


# "the cat sat": R1 P=3/3 R=3/6; R2 P=2/2 R=2/5; RL (LCS 3) as R1
PREFIX = (f1(1, 0.5) + f1(1, 0.4) + f1(1, 0.5)) / 3
# 2,500 × "the" (the answer is cut at 10,000 characters): R1 and RL overlap 2 → P=2/2500 R=2/6; R2 0
FLOOD = 2 * f1(2 / 2500, 2 / 6) / 3

CASES = [
    case("<answer>the cat sat on the mat</answer>", 1.0),
    case("<answer>The cat sat on the mat.</answer>", 1.0),  # exact up to case and punctuation
    case("<answer>the cat sat</answer>", 0.9 * PREFIX + 0.1),
    case("<answer>a dog ran</answer>", 0.1),
    case("", 0.0),
    case("<answer>red car</answer>", 0.9 * f1(0.5, 1) + 0.1, truth="red"),  # 1-token truth: R1 and RL only
    case("<answer>!!!</answer>", 0.05),  # no words
    case("<answer>猫坐在垫子上</answer>", 1.0, truth="猫坐在垫子上"),
    case("<answer>猫坐在</answer>", 0.9 * PREFIX + 0.1, truth="猫坐在垫子上"),  # CJK by character
    case("<answer>cat runs</answer>", 1.0, truth="cats running"),  # Porter stems agree
    case("the " * 250_000, 0.9 * FLOOD),  # 1 MB, untagged
    case("<answer>a dog ran</answer><answer>the cat sat on the mat</answer>", 1.0),
]


def test_golden_cases() -> None:
    assert_reward_contract(OpenEndedReward(), CASES)
