"""Training for accuracy, its parts in-process: the progressive schedule, the keys that need a
real dataset, the no-BN and zero-init models, gradient clipping, label smoothing, the step
clock's pauses, validation sharding (each sample read by one rank, once), and checkpoints
(fingerprint, keep_last, a damaged one skipped by resume=auto)."""

from __future__ import annotations

import dataclasses
import logging
import sys
import time

import pytest
import torch
import torch.nn as nn

from bench.config.data import Phase, parse_progressive, phase_at
from bench.data.loader import eval_batch_sampler
from bench.errors import CheckpointError, ConfigError
from bench.runtime.models import build_model
from bench.runtime.precision import build_precision
from bench.runtime.timing import StepClock
from bench.train.build import TrainStep
from bench.train.loop import phase_figures
from bench.train.result import EpochRecord
from bench.train.resume import Position, TrainingCheckpoints, fingerprint

CPU = torch.device("cpu")


def test_progressive_schedule_parses_into_phases():
    phases = parse_progressive("0,128,512;5,160,384;10,192,320;15,224,256")
    assert phases[0] == Phase(0, 128, 512) and phases[-1] == Phase(15, 224, 256)
    assert [phase_at(phases, e).image_size for e in (0, 4, 5, 9, 10, 15, 17)] == [128, 128, 160, 160, 192, 224, 224]


def test_the_steps_planned_are_a_closed_form_not_a_walk_over_the_epochs(compose):
    """Issue 39 §10: planned() summed steps() epoch by epoch: train.epochs=1000000000 hung before the
    first step. An epoch's steps change only where a progressive phase starts."""
    from bench.rank_context import RankContext
    from bench.runtime.epoch_data import EpochData

    config = compose(
        "data.progressive='0,8,4;3,8,8;7,8,2'",
        "train.steps_per_epoch=null",
        "train.epochs=10",
        "data=imagefolder",
        "data.root=d",
    )
    data = object.__new__(EpochData)  # its batches are not what is counted: a dataset of 100 images
    data.config, data.ctx, data.dataset_size = config, RankContext(), 100
    data.phases = parse_progressive(config.data.progressive)
    walked = [sum(data.steps(e) for e in range(first, 10)) for first in range(12)]
    assert [data.planned(first) for first in range(12)] == walked and walked[0] == 3 * 25 + 4 * 12 + 3 * 50
    assert data.planned(4, skip=5) == walked[4] - 5
    config.train.epochs = 10**9
    started = time.perf_counter()
    assert data.planned(0) == 3 * 25 + 4 * 12 + (10**9 - 7) * 50
    assert time.perf_counter() - started < 1.0  # a hang guard: the old walk took minutes


@pytest.mark.parametrize(
    "text",
    ["", "0,128", "1,128,512", "0,128,512;0,160,384", "0,128,512;5,0,384", "0,a,512", "0,128,512;3,160", "0,128,-1"],
)
def test_a_bad_progressive_schedule_is_one_line_naming_the_key(compose, text):
    with pytest.raises(ConfigError) as info:
        compose(f"data.progressive='{text}'")
    message = str(info.value)
    assert message.startswith("data.progressive=") and "epoch,size,batch" in message and "\n" not in message


def test_keys_that_need_a_real_dataset_are_refused_on_synthetic_data(compose):
    with pytest.raises(ConfigError, match=r"train.eval_every=1 is not valid: .*data=imagefolder"):
        compose("train.eval_every=1")
    with pytest.raises(ConfigError, match=r"train.target_accuracy=0.9 is not valid"):
        compose("train.target_accuracy=0.9")
    with pytest.raises(
        ConfigError,
        match=r"train.steps_per_epoch=None is not valid: accepted a positive integer "
        r"with data=synthetic",
    ):
        compose("train.steps_per_epoch=null")


def test_a_target_means_evaluating_every_epoch_unless_told(compose, tmp_path):
    config = compose("data=imagefolder", f"data.root={tmp_path}", "train.target_accuracy=0.9")
    assert config.train.eval_every == 1
    config = compose("data=imagefolder", f"data.root={tmp_path}", "train.target_accuracy=0.9", "train.eval_every=3")
    assert config.train.eval_every == 3
    with pytest.raises(ConfigError, match=r"train.target_accuracy=1.5 is not valid: accepted a top-1 accuracy"):
        compose("data=imagefolder", f"data.root={tmp_path}", "train.target_accuracy=1.5")


@pytest.mark.parametrize("name", ["/abs", "../up", ""])
def test_checkpoint_dir_stays_inside_the_storage_root(compose, name):
    with pytest.raises(ConfigError, match=r"checkpoint.dir="):
        compose(f"checkpoint.dir='{name}'")


@pytest.mark.slow  # in-process, but builds ResNets: ~4 s
def test_no_bn_model_has_no_batchnorm_and_zero_init_starts_blocks_at_identity(compose):
    no_bn = build_model(compose("model=resnet18", "model.norm=none", "data.num_classes=10").model)
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in no_bn.modules())
    assert no_bn(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    zero = build_model(compose("model=resnet50", "model.zero_init_residual=true", "data.num_classes=10").model)
    blocks = [m for m in zero.modules() if type(m).__name__ == "Bottleneck"]
    assert blocks and all(float(b.bn3.weight.detach().abs().sum()) == 0.0 for b in blocks)
    plain = build_model(compose("model=resnet50", "data.num_classes=10").model)
    assert all(
        float(b.bn3.weight.detach().abs().sum()) > 0 for b in plain.modules() if type(b).__name__ == "Bottleneck"
    )
    both = build_model(compose("model=resnet18", "model.norm=none", "model.zero_init_residual=true").model)
    assert all(
        float(b.conv2.weight.detach().abs().sum()) == 0.0 for b in both.modules() if type(b).__name__ == "BasicBlock"
    )


def test_zero_init_leaves_a_model_alone_where_torchvisions_resnet_was_never_imported(compose, monkeypatch):
    """A rank that builds bench's own model never imports torchvision's ResNet (a fresh forkserver's
    ranks did not): model.zero_init_residual then has no ResNet block to zero, and nothing is touched."""
    from bench.runtime.models import zero_init_residuals

    model = build_model(compose("model=small_cnn", "data.num_classes=10").model)
    before = {name: weight.detach().clone() for name, weight in model.state_dict().items()}
    monkeypatch.delitem(sys.modules, "torchvision.models.resnet", raising=False)
    zero_init_residuals(model)
    zero_init_residuals(model, convs=True)
    assert all(torch.equal(weight, before[name]) for name, weight in model.state_dict().items())


class _Capture(torch.optim.SGD):
    """SGD that remembers the gradient norm it stepped with."""

    def step(self, closure=None):
        grads = [p.grad for group in self.param_groups for p in group["params"] if p.grad is not None]
        self.seen = float(torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads])))
        return super().step(closure)


def _one_step(compose, clip, smoothing=0.0, scaler=None):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Flatten(), nn.Linear(12, 5))
    optimizer = _Capture(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    policy = build_precision(compose().precision, CPU)
    if scaler is not None:
        policy = dataclasses.replace(policy, scaler=scaler)
    step = TrainStep(model, optimizer, scheduler, policy, label_smoothing=smoothing, clip_norm=clip)
    loss = step(torch.randn(8, 3, 2, 2) * 100, torch.randint(0, 5, (8,)))
    return optimizer.seen, float(loss)


def test_gradient_clipping_bounds_the_norm_and_label_smoothing_changes_the_loss(compose):
    unclipped, loss = _one_step(compose, None)
    assert unclipped > 1.0
    clipped, _ = _one_step(compose, 0.5)
    assert clipped == pytest.approx(0.5, rel=1e-4)
    _, smoothed = _one_step(compose, None, smoothing=0.2)
    assert smoothed != pytest.approx(loss)


def test_gradient_clipping_under_a_grad_scaler_clips_the_unscaled_gradients_cpu_scaler_for_the_gpus(compose):
    """fp16's GradScaler (a CUDA one on a GPU; torch's CPU GradScaler stands in here) multiplies the loss by
    2**10: the step unscales before clipping, so the optimizer steps with the true gradients clipped to
    the norm asked (clipped while scaled, they would reach it as 0.5 / 1024)."""
    clipped, _ = _one_step(compose, 0.5, scaler=torch.amp.GradScaler("cpu", init_scale=2.0**10))
    assert clipped == pytest.approx(0.5, rel=1e-4)


def test_the_step_clock_leaves_pauses_out_of_steps_and_window():
    clock = StepClock(CPU)
    clock.mark()
    time.sleep(0.01)
    clock.mark()
    clock.pause()
    time.sleep(0.2)  # an evaluation
    clock.resume()
    time.sleep(0.01)
    clock.mark()
    steps = clock.step_times_ms()
    assert len(steps) == 2 and max(steps) < 150
    assert clock.seconds_between(0, len(clock) - 1) == pytest.approx(sum(steps) / 1000)


@pytest.mark.parametrize("samples, world", [(9, 2), (10, 3), (5, 1), (2, 4)])
def test_validation_reads_every_sample_once_across_ranks(samples, world):
    seen = [i for rank in range(world) for batch in eval_batch_sampler(samples, 4, rank, world) for i in batch]
    assert sorted(seen) == list(range(samples))


@pytest.mark.parametrize("counts, consumers", [([4, 4, 1], 2), ([9], 2), ([3, 2], 5), ([5, 5, 5, 5], 3)])
def test_validation_on_shards_reads_every_record_once(counts, consumers):
    """The val shards' plan (no shuffle): whole shards per reader, or every reader a stride of the
    records when there are fewer shards than readers."""
    from bench.data.shards import consumer_plan

    starts = [sum(counts[:i]) for i in range(len(counts))]
    read = []
    for consumer in range(consumers):
        for shard, record_filter in consumer_plan(counts, 0, 0, False, consumer, consumers):
            rows = range(counts[shard])
            if record_filter is not None:
                stride, first = record_filter
                rows = [r for r in rows if (starts[shard] + r) % stride == first]
            read += [starts[shard] + r for r in rows]
    assert sorted(read) == list(range(sum(counts)))


def test_phase_figures_are_images_per_second_of_each_phase():
    def epoch(n, size, batch, images, seconds):
        return EpochRecord(n, 1, images, seconds, images / seconds, 0.0, 0.1, 1.0, image_size=size, batch_size=batch)

    figures = phase_figures([epoch(1, 128, 8, 80, 1.0), epoch(2, 128, 8, 80, 3.0), epoch(3, 224, 4, 40, 2.0)])
    assert figures == {
        "phase1_image_size": 128,
        "phase1_batch_size": 8,
        "phase1_images_per_second": 40.0,
        "phase2_image_size": 224,
        "phase2_batch_size": 4,
        "phase2_images_per_second": 20.0,
    }


def test_checkpoints_keep_the_last_and_resume_auto_skips_a_damaged_one(compose, tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(tmp_path)
    config = compose("checkpoint.every_epochs=1", "checkpoint.keep_last=2")
    checkpoints = TrainingCheckpoints(config)
    assert checkpoints.url == str(tmp_path / "checkpoints" / fingerprint(config))
    for epoch in (1, 2, 3):
        checkpoints.save({"model": {"w": torch.full((2,), float(epoch))}}, Position(epoch))
    assert [name for name in checkpoints.names()] == ["epoch-0002.pt", "epoch-0003.pt"]
    assert checkpoints.load("auto")["epoch"] == 3
    (tmp_path / "checkpoints" / fingerprint(config) / "epoch-0003.pt").write_bytes(b"half a file")
    with caplog.at_level(logging.WARNING):
        state = checkpoints.load("auto")
    assert state["epoch"] == 2 and "epoch-0003.pt is damaged" in caplog.text
    with pytest.raises(CheckpointError, match=r"epoch-0003.pt is damaged"):
        checkpoints.load("epoch-0003.pt")
    with pytest.raises(CheckpointError, match="is not a checkpoint file"):
        checkpoints.load(str(tmp_path / "nope.pt"))


def test_the_fingerprint_ignores_the_epoch_count_but_not_the_model(compose):
    base = fingerprint(compose())
    assert fingerprint(compose("train.epochs=7")) == base
    assert fingerprint(compose("model=resnet18")) != base
    assert fingerprint(compose("data.batch_size=64")) != base


@pytest.mark.parametrize("scheduler", ["onecycle", "cosine"])
def test_resuming_into_more_epochs_keeps_the_schedule_of_this_run(compose, scheduler, caplog):
    """train.epochs raised on resume (the fingerprint leaves it out on purpose): a schedule with
    a horizon continues on this run's length instead of failing when it steps past the old one
    (OneCycleLR's state carried its old total_steps: 'Tried to step 48 times')."""
    from bench.train.loop import restore
    from bench.train.optim import build_scheduler

    config = compose("+experiment=cpu_smoke", f"scheduler={scheduler}")
    policy = build_precision(config.precision, torch.device("cpu"))

    def run_for(total: int):
        model = nn.Linear(4, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
        return model, optimizer, build_scheduler(optimizer, config.scheduler, total, 0.1)

    model, optimizer, first = run_for(10)
    for _ in range(6):
        optimizer.step()
        first.step()
    state = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": first.state_dict(),
        "scaler": None,
        "rng": __import__("bench.train.resume", fromlist=["rng_states"]).rng_states(),
    }

    model, optimizer, longer = run_for(20)
    with caplog.at_level(logging.WARNING, logger="bench"):
        restore(state, model, optimizer, longer, policy)
    assert longer.last_epoch == 6  # the position is the checkpoint's
    for _ in range(14):  # to the end of this run's 20 steps: no error past the old horizon
        optimizer.step()
        longer.step()
    assert optimizer.param_groups[0]["lr"] < 0.01  # annealed at the end of the longer run
    if scheduler == "onecycle":
        assert "continues on this run's length" in caplog.text


def test_the_accuracy_figures_are_a_typed_record_written_as_they_always_were():
    """issue 29 part 4: the accuracy figures travel as bench.train.result.Accuracy, not a dict; written
    into the record they keep their keys and order, the target's four only with a target (time and
    epochs null when it was not reached), val_images only when counted."""
    from bench.train.result import Accuracy

    base = dict(val_top1=0.5, val_top5=0.9, val_top1_best=0.6, eval_seconds=1.5, evaluations=2, train_wall_seconds=9.0)
    assert list(Accuracy(**base).figures()) == list(base)
    missed = Accuracy(**base, val_images=100, target_accuracy=0.7, reached_target=False).figures()
    assert list(missed) == [
        *base,
        "val_images",
        "target_accuracy",
        "reached_target",
        "time_to_target_seconds",
        "epochs_to_target",
    ]
    assert missed["reached_target"] is False and missed["time_to_target_seconds"] is None
