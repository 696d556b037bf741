"""Resuming with other data groups: a checkpoint taken with ``w`` data-parallel groups (processes /
``actor.sequence_parallel_size``) continues with ``w'`` groups, each taking its share of the samples the
old groups had not taken, so that no sample of the epoch is skipped or taken twice; positions that are
not the start of the epoch's order (dynamic sampling) resume only with ``w`` groups, and hostile
positions are refused naming the file and field, before anything loads."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import pytest
import torch

from videorl.data import Sample
from videorl.errors import ConfigError
from videorl.parallel import Parallel
from videorl.runs.checkpoint import CheckpointError, CheckpointManager
from videorl.runs.resume import ActorState, resume, save_checkpoint
from videorl.train.data import TrainData


def _samples(n: int) -> list[Sample]:
    return [Sample(f"s{i}", "text", f"question {i}", origin=f"train.jsonl:{i + 1}") for i in range(n)]


def _ids(samples: list[Sample]) -> list[int]:
    return [int(s.id[1:]) for s in samples]


def _regrouped(positions: list[tuple[int, int]], size: int, n: int = 20, **kw: Any) -> list[TrainData]:
    """``size`` groups' data continued from ``positions`` (one per group of the checkpoint's run)."""
    groups = [TrainData(_samples(n), seed=3, rank=r, world_size=size, **kw) for r in range(size)]
    for g in groups:
        g.load_group_positions(positions, "ckpt/state.json")
    return groups


def test_two_groups_after_three_steps_continue_in_four_and_back() -> None:
    """k=2 on 4 ranks (2 data groups) after 3 steps of 4 prompts: each group took 6 (samples 0..11 in
    order, unshuffled), so at k=1 on 4 ranks (4 groups, 1 prompt each) the next step takes 12, 13, 14,
    15, one each; the reverse: 4 groups after 3 steps (3 each) continue as 2 groups taking 12, 14 and
    13, 15."""
    four = _regrouped([(0, 6), (0, 6)], 4, shuffle=False)
    assert [g.state_dict() for g in four] == [{"epoch": 0, "index": 3}] * 4
    assert [_ids(g.take(1)) for g in four] == [[12], [13], [14], [15]]
    two = _regrouped([(0, 3)] * 4, 2, shuffle=False)
    assert [g.state_dict() for g in two] == [{"epoch": 0, "index": 6}] * 2
    assert [_ids(g.take(2)) for g in two] == [[12, 14], [13, 15]]


def test_a_count_that_does_not_divide_leaves_the_first_groups_one_ahead() -> None:
    """2 groups with 3 samples each (0..5) continued by 4: groups 0, 1 have taken 2 (0, 4 and 1, 5),
    groups 2, 3 one (2 and 3); the next step takes 6..9 and their positions, again the start of the
    order, go back to 2 groups at 5 each."""
    four = _regrouped([(0, 3), (0, 3)], 4, shuffle=False)
    assert [g.state_dict()["index"] for g in four] == [2, 2, 1, 1]
    assert [_ids(g.take(1)) for g in four] == [[8], [9], [6], [7]]
    again = _regrouped([(g.epoch, g.index) for g in four], 2, shuffle=False)
    assert [_ids(g.take(1)) for g in again] == [[10], [11]]


def test_every_sample_of_a_shuffled_epoch_once_across_the_change() -> None:
    """Seeded shuffle, 21 samples: 2 groups take 4 each (places 0..7 of the epoch's order), 3 groups
    then hold places 9, 12, 15, 18 / 10, 13, 16, 19 / 8, 11, 14, 17, 20 of it: the rest, once each."""
    order = list(range(21))
    random.Random(3 * 1_000_003).shuffle(order)  # epoch 0's order, whatever the number of groups
    two = [TrainData(_samples(21), seed=3, rank=r, world_size=2) for r in range(2)]
    before = [_ids(g.take(4)) for g in two]
    assert sorted(before[0] + before[1]) == sorted(order[:8])
    three = _regrouped([(g.epoch, g.index) for g in two], 3, n=21)
    after = [_ids(g.take(count)) for g, count in zip(three, (4, 4, 5), strict=True)]
    assert after == [[order[p] for p in range(start, 21, 3)] for start in (9, 10, 8)]
    assert [g.state_dict() for g in three] == [{"epoch": 0, "index": 7}] * 3  # the next take: epoch 1


def test_positions_dynamic_sampling_left_apart_resume_only_with_as_many_groups() -> None:
    """Group 0 took 2, group 1 three (places 0, 2 and 1, 3, 5): not the start of the order, so 4 groups
    would skip place 4 or take 5 again; 2 groups continue where each stood."""
    with pytest.raises(ConfigError, match=re.escape("resume it with 2 data groups")):
        _regrouped([(0, 2), (0, 3)], 4)
    with pytest.raises(ConfigError, match="cannot be cut into another number of groups"):
        _regrouped([(0, 3), (1, 3)], 1)  # the same counts, in different epochs
    assert [g.state_dict()["index"] for g in _regrouped([(0, 2), (0, 3)], 2)] == [2, 3]


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(2, 4)).sum().backward()
    optimizer.step()
    return model, optimizer


def _checkpoint(tmp_path: Path, data: dict[str, Any]) -> CheckpointManager:
    """A one-process checkpoint whose ``state.json`` says ``data`` (as if written by those ranks)."""
    model, optimizer = _model_and_optimizer()
    manager = CheckpointManager(tmp_path)
    save_checkpoint(3, ActorState(model, optimizer), manager, Parallel(), data_state={}, wait=True)
    state_file = manager.path_for(3) / "state.json"
    state = json.loads(state_file.read_text())
    state_file.write_text(json.dumps({**state, "data": data}))
    return manager


def test_a_k2_checkpoint_of_four_ranks_resumes_in_one_process(tmp_path: Path) -> None:
    """4 ranks at k=2 (2 data groups at 6 after 3 steps of 4 prompts) resumed in one process: its one
    group has taken samples 0..11, continues at 12, and the weights and moments are the saved ones."""
    at_six = {"epoch": 0, "index": 6}
    manager = _checkpoint(tmp_path, {"ranks": [at_six] * 4, "sequence_parallel_size": 2})
    saved, saved_optimizer = _model_and_optimizer()
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    data = TrainData(_samples(20), seed=3, shuffle=False)
    assert resume("auto", ActorState(model, optimizer), manager, Parallel(), data=data) == 3
    assert data.state_dict() == {"epoch": 0, "index": 12} and _ids(data.take(4)) == [12, 13, 14, 15]
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), saved.state_dict().values()))
    moments = [optimizer.state[p]["exp_avg_sq"] for p in model.parameters()]
    assert all(
        torch.equal(a, saved_optimizer.state[p]["exp_avg_sq"]) for a, p in zip(moments, saved.parameters())
    )


@pytest.mark.parametrize(
    ("data", "error", "field"),
    [
        (
            {"ranks": [{"epoch": 0, "index": 6}] * 4, "sequence_parallel_size": "2"},
            CheckpointError,
            "'data.sequence_parallel_size' must be a positive integer dividing the 4 ranks",
        ),
        (
            {"ranks": [{"epoch": 0, "index": 6}] * 4, "sequence_parallel_size": 0},
            CheckpointError,
            "'data.sequence_parallel_size' must be a positive integer",
        ),
        (
            {"ranks": [{"epoch": 0, "index": 6}] * 4, "sequence_parallel_size": 3},
            CheckpointError,
            "dividing the 4 ranks of 'data.ranks', got 3",
        ),
        (
            {"ranks": [{"epoch": 0, "index": 6}, {"epoch": 0, "index": 5}], "sequence_parallel_size": 2},
            CheckpointError,
            "'data.ranks[1]' differs from 'data.ranks[0]'",
        ),
        (
            {"ranks": [{"epoch": 0, "index": -1}]},
            CheckpointError,
            "'data.ranks[0].index' must be an integer >= 0, got -1",
        ),
        (
            {"ranks": [{"epoch": "0", "index": 1}]},
            CheckpointError,
            "'data.ranks[0].epoch' must be an integer >= 0, got '0'",
        ),
        ({"ranks": [{"epoch": 0, "index": True}]}, CheckpointError, "'data.ranks[0].index' must be"),
        ({"ranks": []}, CheckpointError, "field 'data.ranks' holds no data position"),
        (
            {"ranks": [{"epoch": 0, "index": 11}] * 2},
            CheckpointError,
            "data group 0 is at sample 11 of its share, which holds 10",
        ),
        (
            {"ranks": [{"epoch": 0, "index": 2}, {"epoch": 0, "index": 3}]},
            ConfigError,
            "resume it with 2 data groups (training processes / actor.sequence_parallel_size = 2)",
        ),
    ],
)
def test_positions_that_cannot_be_restored_are_refused_before_anything_loads(
    tmp_path: Path, data: dict[str, Any], error: type[Exception], field: str
) -> None:
    manager = _checkpoint(tmp_path, data)
    model = torch.nn.Linear(4, 3)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    with pytest.raises(error, match=re.escape(field)) as raised:
        resume(
            "auto", ActorState(model, optimizer), manager, Parallel(), data=TrainData(_samples(20), seed=3)
        )
    if error is CheckpointError:
        assert str(manager.path_for(3) / "state.json") in str(raised.value)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_state_of_its_own_resumes_only_as_written(tmp_path: Path) -> None:
    """A data position other than TrainData's (its own fields) cannot be regrouped: as many processes
    at the same k, or a ConfigError saying so."""

    class Position:
        def __init__(self) -> None:
            self.state: dict[str, Any] = {}

        def state_dict(self) -> dict[str, Any]:
            return self.state

        def load_state_dict(self, state: dict[str, Any]) -> None:
            self.state = state

    manager = _checkpoint(tmp_path, {"ranks": [{"cursor": 7}] * 2, "sequence_parallel_size": 2})
    model = torch.nn.Linear(4, 3)
    state = ActorState(model, torch.optim.AdamW(model.parameters()))
    message = "written by 2 process(es) at actor.sequence_parallel_size=2; resume it with as many"
    with pytest.raises(ConfigError, match=re.escape(message)):
        resume("auto", state, manager, Parallel(), data=Position())
