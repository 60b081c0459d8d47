"""Progress lines as real scripts print them (a corpus, each line naming its source), and a property:
log lines that are not progress never parse as a step.

Hang detection (``--hang-timeout``) is only as good as this parser: a line here that gave no step
would leave its job with the output-line fallback only.
"""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from launcher.logs.metrics import parse_line
from launcher.logs.progress import RankDeriver
from tests.harness.hypo import examples

# (source, line, expected (epoch, step) progress, expected loss or None)
CORPUS = [
    # MindSpore tutorials: distributed data parallel (msrun/mpirun/rank table/dynamic cluster pages), startup
    # methods and memory offload: `print("epoch: %s, step: %s, loss is %s" % (epoch, i, loss))`, epochs and
    # steps counted from 0.
    ("MindSpore tutorial: msrun startup, worker_0.log", "epoch: 0, step: 0, loss is 2.3499548", (0, 0), 2.3499548),
    ("MindSpore tutorial: msrun startup, worker_0.log", "epoch: 0, step: 10, loss is 1.6682479", (0, 10), 1.6682479),
    (
        "MindSpore tutorial: mpirun startup, log_output/1/rank.0/stdout",
        "epoch: 0, step: 40, loss is 0.85778403",
        (0, 40),
        0.85778403,
    ),
    (
        "MindSpore tutorial: rank table startup, device0/train0.log",
        "epoch: 0, step: 90, loss is 0.5912",
        (0, 90),
        0.5912,
    ),
    (
        "MindSpore tutorial: parameter server, output/worker_0.log",
        "epoch: 0, step: 30, loss is 8.589715",
        (0, 30),
        8.589715,
    ),
    # MindSpore LossMonitor (mindspore/train/callback/_loss_monitor.py: "epoch: %s step: %s, loss is %s").
    ("MindSpore LossMonitor", "epoch: 1 step: 1875, loss is 0.0602", (1, 1875), 0.0602),
    ("MindSpore LossMonitor behind mslaunch's prefix", "[rank 3] epoch: 12 step: 7, loss is 1.5e-03", (12, 7), 0.0015),
    ("MindSpore LossMonitor, a loss array", "epoch: 2 step: 5, loss is [2.3025851]", (2, 5), 2.3025851),
    # The MindSpore model zoo (BERT's LossCallBack prints the percent of the epoch and the Tensor tuple).
    (
        "MindSpore models: BERT LossCallBack",
        "epoch: 1, current epoch percent: 0.500, step: 100, loss is (Tensor(shape=[], dtype=Float32, value= 7.43), "
        "Tensor(shape=[], dtype=Bool, value= False))",
        (1, 100),
        7.43,
    ),
    ("MindSpore models: BERT LossCallBack on CPU", "epoch: 1, step: 20, loss is 6.9077554", (1, 20), 6.9077554),
    # MindFormers MFLossMonitor (docs: resume training, worker_0.log | grep 'Epoch:').
    (
        "MindFormers MFLossMonitor",
        "2025-04-07 15:34:29,173 - [mindformers/core/callback/callback.py:529] - INFO - { Epoch:[  1/  2], step:[    "
        "2/   19], "
        "loss: 10.633, per_step_time: 1752ms, lr: 1e-05, overflow cond: False, loss_scale: 1.0, global_norm: [1 "
        "508834], "
        "train_throughput_per_npu: 170.738T",
        (1, 2),
        10.633,
    ),
    (
        "MindFormers MFLossMonitor, mean loss",
        "- INFO - { Epoch:[  1/  1], step:[   92/25880], loss:[9.902/9.950], per_step_time: 2068ms",
        (1, 92),
        9.902,
    ),
    # The reference trainer (launcher/workloads/resnet50_cifar10.py prints LossMonitor's format).
    ("mslaunch reference trainer", "epoch: 1 step: 40, loss is 2.0712", (1, 40), 2.0712),
    # MSLAUNCH_METRIC: any script's one line.
    ("MSLAUNCH_METRIC", 'MSLAUNCH_METRIC {"step": 12, "loss": 0.42}', (None, 12), 0.42),
    # torch-style lines.
    ("PyTorch tutorial (Epoch [e/E], Step [s/S])", "Epoch [1/5], Step [100/600], Loss: 0.2154", (1, 100), 0.2154),
    ("torch-style step N/M", "step 10/100 loss=2.31", (None, 10), 2.31),
    ("torch-style step N/M, no loss", "train | step 7/1000 | 1.02 it/s", (None, 7), None),
    (
        "Megatron-LM iteration line",
        " iteration       10/    1000 | consumed samples:          640 | elapsed time per iteration (ms): 3514.5 | "
        "learning rate: 1.500E-05 | global batch size:    64 | lm loss: 1.095398E+01 | loss scale: 4294967296.0 |",
        (None, 10),
        10.95398,
    ),
    (
        "accelerate-style logger (step: N, loss: X)",
        "2023-05-06 19:05:07,456 - INFO - [Train] step: 399, loss: 0.086791, lr: 0.000200",
        (None, 399),
        0.086791,
    ),
    ("HF-style global_step", "global_step=21, train_loss=0.4915", (None, 21), 0.4915),
    # Lines a 2-rank job printed that the format list did not read (the grammar does).
    ("keyword counter, no punctuation", "iter 3 | loss 0.6667 | lr 0.01", (None, 3), 0.6667),
    ("epoch and step keywords, no punctuation", "Epoch 1 Step 3 Loss 0.6667", (1, 3), 0.6667),
    ("bracketed counter", "[step 3] loss: 0.6667", (None, 3), 0.6667),
    (
        "PyTorch MNIST example (the counter counts samples)",
        "Train Epoch: 1 [640/60000 (1%)]\tLoss: 0.2154",
        (1, 640),
        0.2154,
    ),
    (
        "PyTorch ImageNet example",
        "Epoch: [0][  10/5005]\tTime  0.331 ( 0.593)\tData  0.000 ( 0.247)\tLoss 6.8921e+00 (6.9076e+00)",
        (0, 10),
        6.8921,
    ),
    ("a JSON line without the prefix", '{"step": 10, "loss": 0.3}', (None, 10), 0.3),
]


@pytest.mark.parametrize("source,line,progress,loss", CORPUS, ids=[f"{c[0]}: {c[1][:30]}" for c in CORPUS])
def test_corpus_line_gives_its_step(source, line, progress, loss):
    m = parse_line(line)
    assert m is not None, f"{source}: no metric"
    assert m.progress == progress
    assert m.loss == (pytest.approx(loss) if loss is not None else None)


# Lines real jobs print that are not progress (they may name steps, epochs and losses).
NOT_PROGRESS = [
    ("TimeMonitor: per-epoch, no step", "Train epoch time: 5312.412 ms, per step time: 132.810 ms"),
    (
        "MindSpore warning",
        "[WARNING] ME(4711:140183,MainProcess):2026-11-25-13:00:01.123.456 [mindspore/train/model.py:1120] "
        "The step 3 of graph compile took long",
    ),
    ("checkpoint save", "checkpoint: /tmp/ckpt_0/resnet50-1_40.ckpt"),
    ("checkpoint at a step", "Saving checkpoint at step 500 to /ckpt/step_500.ckpt"),
    ("scheduler setting", "lr scheduler: StepLR(step_size=30, gamma=0.1)"),
    ("budget line", "warmup_steps: 100, total_steps: 1000"),
    ("plan line", "Start training for 10 epochs, 1875 steps per epoch"),
    ("download progress", "Downloading: 45/100 MB"),
    ("traceback frame", '  File "train.py", line 88, in train_step'),
    ("loss scale", "loss scale: 65536, overflow: False"),
    ("collective timeout", "RuntimeError: Ring ReduceScatter wait receiving from rank 1 failed"),
    ("epoch announcement", "Epoch 3/10 begins"),
]


@pytest.mark.parametrize("source,line", NOT_PROGRESS, ids=[c[0] for c in NOT_PROGRESS])
def test_non_progress_lines_give_no_step(source, line):
    m = parse_line(line)
    assert m is None or m.progress is None, f"{source}: {m}"


# Where progress can start: a counter keyword right before a number (``step 5``, ``iter: 3``, ``step [2``,
# ``it=4``, ``batch 7``), an epoch's ``[n/``, a tqdm bar's ``| n/N [0``, a Keras bar's ``n/N [=>..]``.  Lines
# without one must never parse as a step, whatever numbers, losses and epochs they carry.
_STEP_NUMBER = re.compile(
    r"(step|iter|it|batch)\w*\W{0,3}\d|epoch[\W\d]*\[\s*\d+\s*/|\|\s*\d+/\d+\s*\[\d|\d/\d+ \[[=>.]*\]", re.IGNORECASE
)
_WORDS = [
    "step",
    "steps",
    "Step",
    "epoch",
    "Epoch",
    "loss",
    "Loss",
    "iter",
    "lr",
    "INFO",
    "WARNING",
    "ERROR",
    "[Train]",
    "rank",
    "checkpoint",
    "saved",
    "MB",
    "img/s",
    "samples/s/p",
    "is",
    "of",
    "at",
    "time:",
    "ms",
    "per",
    "to",
    "grad_norm",
    "global",
    "it",
    "batch",
    "Batch",
    "ITER",
    "train_loss",
    "lm loss",
    "tensor(",
    "nan",
    "inf",
    "%",
    "|",
    "{",
    "}",
    '"step":',
    '"loss":',
    "[==>..]",
    "- loss:",
]
_SEPS = [" ", ", ", ": ", " | ", "=", "/", " [", "] ", "(", ")", ":", "\t", "#"]
_token = st.one_of(
    st.sampled_from(_WORDS),
    st.integers(min_value=0, max_value=10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False, width=32).map(lambda f: f"{f:.4g}"),
    st.text(alphabet="abcdefghijklmnopqrstuvwxyz_.", min_size=1, max_size=8),
)


@settings(max_examples=examples(600), deadline=None)
@given(st.lists(st.tuples(_token, st.sampled_from(_SEPS)), max_size=14))
def test_random_log_lines_without_a_step_count_are_never_progress(parts):
    line = "".join(tok + sep for tok, sep in parts)
    assume(not _STEP_NUMBER.search(line))
    m = parse_line(line)
    assert m is None or m.progress is None, line


def test_zero_based_steps_and_epochs_count_from_one_over_the_run():
    d = RankDeriver(rank=0)
    lines = [f"epoch: {e}, step: {s}, loss is 1.0" for e in (0, 1) for s in (0, 1, 2)]
    recs = d.feed([parse_line(line) for line in lines], 1.0)
    assert [r["global_step"] for r in recs] == [1, 2, 3, 4, 5, 6]


def test_zero_based_steps_with_a_known_budget():
    d = RankDeriver(rank=0)
    lines = [
        "Epoch [1/2], Step [0/10], Loss: 1.0",
        "Epoch [1/2], Step [9/10], Loss: 1.0",
        "Epoch [2/2], Step [0/10], Loss: 1.0",
    ]
    recs = d.feed([parse_line(line) for line in lines], 1.0)
    assert [r["global_step"] for r in recs] == [1, 10, 11]
    assert recs[-1]["total_steps"] == 20
