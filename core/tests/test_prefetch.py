"""``data.prefetch``: the next batch is prepared in a background thread, in order, with the same results;
the data position counts only the samples taken; a background error is raised for the sample named."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from videorl.data import Sample
from videorl.encoding import Prefetcher
from videorl.train.data import TrainData


def _samples(n: int) -> list[Sample]:
    return [Sample(f"s{i}", "text", f"question {i}", origin=f"train.jsonl:{i + 1}") for i in range(n)]


class _Recorder:
    """A ``prepare`` that returns ``(sample id, thread name)``, optionally slowly or failing on ``bad``."""

    def __init__(self, delay: float = 0.0, bad: str | None = None) -> None:
        self.delay, self.bad = delay, bad
        self.calls: list[tuple[str, str]] = []
        self.running = 0
        self.overlap = False

    def __call__(self, sample: Sample) -> Any:
        self.running += 1
        self.overlap |= self.running > 1
        try:
            time.sleep(self.delay)
            self.calls.append((sample.id, threading.current_thread().name))
            if sample.id == self.bad:
                raise RuntimeError("the video could not be decoded")
            return sample.id
        finally:
            self.running -= 1


def test_upcoming_is_the_next_take_across_epochs_and_moves_nothing() -> None:
    data = TrainData(_samples(5), seed=1)
    data.take(3)
    state = data.state_dict()
    ahead = data.upcoming(4)  # crosses into epoch 1
    assert data.state_dict() == state
    assert [s.id for s in data.take(4)] == [s.id for s in ahead]
    assert data.state_dict()["epoch"] == 1


def test_take_hands_the_batch_and_the_next_one_to_the_prefetcher() -> None:
    handed: list[list[str]] = []

    class Spy:
        def prefetch(self, samples: Any) -> None:
            handed.append([s.id for s in samples])

    plain = TrainData(_samples(6), seed=2)
    data = TrainData(_samples(6), seed=2, prefetcher=Spy())
    first, second = plain.take(2), plain.take(2)
    assert [s.id for s in data.take(2)] == [s.id for s in first]
    assert handed == [[s.id for s in first + second]]
    assert data.state_dict() == {"epoch": 0, "index": 2}  # only what was taken, never what is ahead


def test_prefetched_batches_are_prepared_in_the_background_in_order() -> None:
    samples = _samples(6)
    recorder = _Recorder(delay=0.01)
    ahead = Prefetcher(recorder)
    ahead.prefetch(samples[:3] + samples[3:])
    assert [ahead.get(s) for s in samples[:3]] == ["s0", "s1", "s2"]
    time.sleep(0.2)  # the "update": the next batch is prepared meanwhile
    assert [c[0] for c in recorder.calls] == [s.id for s in samples]
    assert {c[1] for c in recorder.calls} == {"videorl-prefetch"}
    ahead.prefetch(samples[3:])  # the next take: its batch is already prepared, nothing is redone
    assert [ahead.get(s) for s in samples[3:]] == ["s3", "s4", "s5"]
    assert len(recorder.calls) == 6 and not recorder.overlap


def test_a_sample_not_queued_is_prepared_at_once_never_beside_the_background() -> None:
    samples = _samples(4)
    recorder = _Recorder(delay=0.02)
    ahead = Prefetcher(recorder)
    ahead.prefetch(samples[:3])
    assert ahead.get(samples[3]) == "s3"  # not queued: prepared here, under the same lock
    assert ("s3", threading.current_thread().name) in recorder.calls
    ahead.prefetch(samples[1:2])  # a different batch: the rest of the queue is cancelled
    assert ahead.get(samples[1]) == "s1"
    assert not recorder.overlap


def test_a_background_error_is_raised_for_its_sample_naming_it() -> None:
    samples = _samples(3)
    ahead = Prefetcher(_Recorder(bad="s1"))
    ahead.prefetch(samples)
    time.sleep(0.1)  # s1 has failed in the background: nothing is raised until it is asked for
    assert ahead.get(samples[0]) == "s0"
    with pytest.raises(RuntimeError, match="could not be decoded") as info:
        ahead.get(samples[1])
    notes = " ".join(getattr(info.value, "__notes__", []))
    assert "'s1'" in notes and "train.jsonl:2" in notes and "data.prefetch" in notes
    assert ahead.get(samples[2]) == "s2"


def _prefetch_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "videorl-prefetch"]


def test_close_stops_the_thread_and_later_samples_are_prepared_at_once() -> None:
    samples = _samples(4)
    before = len(_prefetch_threads())
    recorder = _Recorder(delay=0.05)
    ahead = Prefetcher(recorder)
    ahead.prefetch(samples)
    assert len(_prefetch_threads()) == before + 1
    ahead.close()  # s0 may be running (it finishes); s1..s3 are cancelled, never prepared
    assert len(_prefetch_threads()) == before
    assert len(recorder.calls) <= 1
    ahead.prefetch(samples)  # closed: queues nothing, starts no thread
    assert len(_prefetch_threads()) == before
    assert ahead.get(samples[2]) == "s2"  # prepared here, at once
    assert recorder.calls[-1] == ("s2", threading.current_thread().name)
    ahead.close()  # a second close does nothing


# --- a real run ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def task(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path, Path]:
    from videorl import demo
    from videorl.plugins import load_plugins

    out = tmp_path_factory.mktemp("task")
    model, train, val = demo.prepare(out, load_plugins(), family="qwen2_5_vl", seed=0, train=6, val=1)
    return out, model, train, val


def _run(task: Any, run: Path, steps: int, prefetch: bool, extra: tuple[str, ...] = ()) -> Any:
    from videorl import demo
    from videorl.config import load_config
    from videorl.plugins import load_plugins
    from videorl.train.compose import build_training

    out, model, train, val = task
    overrides = [
        *demo.demo_overrides(out, model, train, val, steps=steps, seed=3, engine="hf"),
        f"output_dir={run}",
        "data.rollout_batch_size=2",
        "actor.global_batch_size=2",
        "rollout.n=2",
        "rollout.max_response_length=8",
        "trainer.progress_bar=false",
        "trainer.val_every=0",
        "trainer.save_every=1",
        f"data.prefetch={str(prefetch).lower()}",
        *extra,
    ]
    before = len(_prefetch_threads())
    training = build_training(load_config(None, overrides), load_plugins())
    training.run()
    assert len(_prefetch_threads()) == before  # run() closes the training: the prefetch thread stops
    return training


@pytest.mark.slow
def test_prefetch_on_and_off_train_identically_and_resume_identically(
    task: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import torch

    from videorl.encoding import PromptEncoder
    from videorl.runs.history import read_metrics

    prepared: list[tuple[str, str]] = []
    prepare = PromptEncoder.prepare

    def recording(self: PromptEncoder, sample: Sample) -> Any:
        prepared.append((sample.id, threading.current_thread().name))
        return prepare(self, sample)

    monkeypatch.setattr(PromptEncoder, "prepare", recording)
    off = _run(task, tmp_path / "off", 3, prefetch=False)
    assert {name for _, name in prepared} == {threading.current_thread().name}
    prepared.clear()
    on = _run(task, tmp_path / "on", 3, prefetch=True)
    assert "videorl-prefetch" in {name for _, name in prepared}
    checkpoints = [tmp_path / run / "checkpoints" / "step_000003" for run in ("off", "on")]
    manifests = [json.loads((c / "state.json").read_text()) for c in checkpoints]
    taken = {"ranks": [{"epoch": 0, "index": 6}], "sequence_parallel_size": 1}  # taken only
    assert manifests[0]["data"] == manifests[1]["data"] == taken
    assert (checkpoints[0] / "rng.json").read_bytes() == (checkpoints[1] / "rng.json").read_bytes()
    for key, value in off.actor.model.state_dict().items():
        assert torch.equal(value, on.actor.model.state_dict()[key]), key
    rewards = [
        [r["reward/overall"] for r in read_metrics(tmp_path / run / "metrics.jsonl")] for run in ("off", "on")
    ]
    assert rewards[0] == rewards[1]

    # resume the prefetching run from step 2: step 3 is the uninterrupted run's step 3
    resumed = tmp_path / "resumed"
    _run(task, resumed, 2, prefetch=True)
    again = _run(task, resumed, 3, prefetch=True, extra=("trainer.resume=auto",))
    for key, value in on.actor.model.state_dict().items():
        assert torch.equal(value, again.actor.model.state_dict()[key]), key


def test_a_prompt_handed_over_is_freed_when_the_step_drops_it() -> None:
    """The background thread keeps no reference to what it prepared: at most the step's batch and the
    one being prepared are alive (a prompt holds a video's frames and pixels)."""
    import gc
    import weakref

    class Prepared:
        pass

    prefetcher = Prefetcher(lambda sample: Prepared())
    samples = _samples(2)
    prefetcher.prefetch(samples)
    first = prefetcher.get(samples[0])
    second = prefetcher.get(samples[1])  # the thread prepared both and now waits for more
    refs = [weakref.ref(first), weakref.ref(second)]
    del first, second
    gc.collect()
    assert [r() for r in refs] == [None, None]
    prefetcher.close()
