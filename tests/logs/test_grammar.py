"""The progress grammar (launcher/logs/grammar.py): classes of lines with many spellings, lines generated
from the grammar (separators, brackets, cases, prefixes, totals, value forms) parse to their step and
loss, and lines that are not progress (config dumps, a counter without a loss, timestamps, IP
addresses, versions, tracebacks, log prefixes) never do."""

from __future__ import annotations

import json
import math
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from launcher.logs.metrics import parse_line
from launcher.logs.progress import Progress, RankDeriver, snapshot
from tests.harness.hypo import examples

# (line, (epoch, step) progress, loss; None: a non-finite loss)
CLASSES = [
    # A keyword counter without the punctuation of any one format, a loss anywhere.
    ("iter 3 | loss 0.6667 | lr 0.01", (None, 3), 0.6667),
    ("Iteration 3 - Loss 0.6667 - lr 1e-2", (None, 3), 0.6667),
    ("it 12, loss=0.5", (None, 12), 0.5),
    ("ITER: 7 LOSS: 1.25", (None, 7), 1.25),
    ("batch 40 train_loss 2.5", (None, 40), 2.5),
    ("global_step 800 | lm loss 3.1", (None, 800), 3.1),
    ("loss 0.3 at step 9", (None, 9), 0.3),
    (
        "steps: 100 loss: 1.2345 iter time (s): 0.123 samples/sec: 260.1",
        (None, 100),
        1.2345,
    ),  # DeepSpeed's pipeline engine
    ("Iterations=7, Loss=0.5", (None, 7), 0.5),
    # An epoch, then a step keyword: the step counts within the epoch (unless it says global).
    ("Epoch 1 Step 3 Loss 0.6667", (1, 3), 0.6667),
    ("epoch=2 iter=5 loss=0.1", (2, 5), 0.1),
    ("EPOCH 4 BATCH 17 LOSS 0.01", (4, 17), 0.01),
    ("Epoch(3/10) Step(20/50) avg_loss: 0.75", (3, 20), 0.75),
    ("epoch 2 global_step 300 loss 0.2", (None, 300), 0.2),
    # Bracketed counters.
    ("[step 3] loss: 0.6667", (None, 3), 0.6667),
    ("(iter 3) loss: 0.6667", (None, 3), 0.6667),
    ("[Step 3/100] Loss = 0.6667", (None, 3), 0.6667),
    ("step[3] loss[0.6667]", (None, 3), 0.6667),
    ("[Iteration #42] train/loss: 0.5", (None, 42), 0.5),
    # An epoch's [n/N] (PyTorch's MNIST counts samples; the ImageNet example batches).
    ("Train Epoch: 1 [640/60000 (1%)]\tLoss: 0.2154", (1, 640), 0.2154),
    ("Epoch 3 [1280/50000 (3%)] loss=1.5", (3, 1280), 1.5),
    (
        "Epoch: [0][  10/5005]\tTime  0.331 ( 0.593)\tLoss 6.8921e+00 (6.9076e+00)\tAcc@1   0.00 (  0.11)",
        (0, 10),
        6.8921,
    ),
    # Loss values as tensors and non-finite values.
    ("step: 5 loss: Tensor(shape=[], dtype=Float32, value= 0.6667)", (None, 5), 0.6667),
    ("step 5 loss tensor(0.6667, device='cuda:0', grad_fn=<NllLossBackward0>)", (None, 5), 0.6667),
    ("step 5 loss np.float32(0.6667)", (None, 5), 0.6667),
    ("step 5 loss: nan", (None, 5), None),
    ("Step 6 Loss INF", (None, 6), None),
    # A tqdm bar with a loss (PyTorch Lightning), read from its last drawing.
    ("Epoch 0:  45%|####5     | 430/938 [00:05<00:06, 80.12it/s, v_num=0, train_loss=0.312]", (0, 430), 0.312),
    ("Epoch 0:   1%| | 1/938 [00:01<, loss=0.9]\rEpoch 0:   1%| | 2/938 [00:01<, loss=0.8]\r", (0, 2), 0.8),
    # A Keras progress bar.
    ("  32/1875 [>.............................] - ETA: 1:23 - loss: 2.3026 - accuracy: 0.1000", (None, 32), 2.3026),
    ("1875/1875 [==============================] - 5s 3ms/step - loss: 0.2954", (None, 1875), 0.2954),
    # JSON objects (and Python dicts) without the MSLAUNCH_METRIC prefix.
    ('{"step": 10, "loss": 0.3}', (None, 10), 0.3),
    ('[rank0]: {"global_step": 11, "train/loss": 0.25, "lr": 0.001}', (None, 11), 0.25),
    ("{'iteration': 12, 'lm loss': 1.5}", (None, 12), 1.5),
    ('{"trainer/global_step": 13, "train_loss_step": 0.125, "epoch": 1}', (None, 13), 0.125),
    ('{"step": 14, "loss": "nan"}', (None, 14), None),
]


@pytest.mark.parametrize("line,progress,loss", CLASSES, ids=[c[0][:40] for c in CLASSES])
def test_classes_of_progress_lines(line, progress, loss):
    m = parse_line(line)
    assert m is not None and m.kind == "step", line
    assert m.progress == progress
    if loss is None:
        assert m.loss is None and m.event == "nonfinite_loss" and m.loss_text
    else:
        assert m.loss == pytest.approx(loss)


def test_the_main_loss_wins_over_component_and_evaluation_losses():
    assert parse_line("step 3 | aux_loss 0.1 | loss 0.5").loss == 0.5
    assert parse_line("step 3 | mlm_loss 0.4 | nsp_loss 0.1").loss == 0.4  # none is the main one: the first
    assert parse_line("step 3 | val_loss 0.9 | train_loss 0.5").loss == 0.5
    assert parse_line('{"step": 3, "val_loss": 0.9, "train/loss": 0.5}').loss == 0.5
    assert parse_line("step 3 | loss scale: 1024 | loss: 0.5").loss == 0.5


def test_counts_of_a_sample_counter_and_a_total():
    mnist = parse_line("Train Epoch: 2 [640/60000 (1%)]\tLoss: 0.2154")
    assert (mnist.unit, mnist.epoch, mnist.step, mnist.steps_per_epoch, mnist.step_in_epoch) == (
        "samples",
        2,
        640,
        60000,
        True,
    )
    batches = parse_line("Epoch: [0][  10/5005]\tLoss 6.8")
    assert batches.unit is None and batches.steps_per_epoch == 5005
    run = parse_line("iteration 10/1000 | lm loss: 1.0")
    assert (run.total_steps, run.steps_per_epoch, run.step_in_epoch) == (1000, None, False)
    in_epoch = parse_line("Epoch [1/5], Step [100/600], Loss: 0.2")
    assert (in_epoch.epochs, in_epoch.steps_per_epoch) == (5, 600)


NOT_PROGRESS = [
    # config dumps
    "warmup_steps: 100",
    "max_steps=1000",
    "  step_size: 30",
    "lr_scheduler: StepLR(step_size=30, gamma=0.1)",
    "Namespace(batch_size=32, max_steps=1000, loss_scale=1024.0, lr=0.01)",
    "loss_scale: 65536, max_iter: 9000",
    '{"max_steps": 1000, "loss": "cross_entropy", "warmup_steps": 100}',
    "{'loss': 0.3, 'learning_rate': 5e-05, 'epoch': 0.5}",
    # a counter without a loss, a loss without a counter, an evaluation's loss
    "saving at step 500",
    "checkpoint saved at step 500",
    "steps: 1000",
    "Train for 1000 steps, loss 2.3 expected",
    "num steps 1000, init loss 2.3",
    "  32/1875 [>.............................] - ETA: 1:23",
    "Saving checkpoint at step 500 to /ckpt/step_500.ckpt",
    "The step 3 of graph compile took long",
    "Test set: Average loss: 0.0514, Accuracy: 9838/10000 (98%)",
    "loss scale: 65536, overflow: False",
    "step 3 val_loss 0.5",
    "Epoch 3/10 begins",
    " 45%|####5     | 450/1000 [00:10<00:12, 80.12it/s]",
    # timestamps, IP addresses and versions next to counter words
    "2026-11-26 07:21:16,123 INFO step timer started",
    "step 07:21:16 loss 0.5",
    "[step 2026-11-26] loss 0.5",
    "step 10.0.0.1 loss 0.3",
    "it 192.168.1.4:8118, loss 0.3",
    "step 3.5 loss 0.3",
    "mindspore 2.3.1 step-lr loss 0.1",
    "torch==2.1.0+cu118 (batch 1.2.3) loss 0.2",
    # tracebacks
    "Traceback (most recent call last):",
    '  File "train.py", line 88, in train_step',
    "    optimizer.step()",
    "    loss = criterion(output, target)",
    "RuntimeError: CUDA error: device-side assert triggered",
]


@pytest.mark.parametrize("line", NOT_PROGRESS)
def test_lines_that_are_not_progress(line):
    m = parse_line(line)
    assert m is None or m.progress is None, m


# ---- lines generated from the grammar ----

PREFIXES = [
    "",
    "2026-11-26 07:21:16,123 ",
    "2026-11-26 07:21:16,123 - INFO - ",
    "INFO:root:",
    "[rank0]: ",
    "[rank 3] ",
    "[2026-11-26 07:21:16][INFO] ",
    "W1126 07:21:16.123456 1234 train.py:88] ",
    "2026-11-26T07:21:16Z | ",
    "[1,0]<stdout>:",
    "worker-3 | ",
    "INFO:__main__:[Train] ",
]
KEYWORDS = ["step", "iter", "iteration", "it", "batch", "global_step", "global step", "train_step", "cur_iter"]
CASES = [str.lower, str.upper, str.title, lambda s: s]
KEY_SEPS = [" ", ": ", "=", " = ", ":", " #", "#", " :"]
LOSS_KEYS = [
    "loss",
    "Loss",
    "LOSS",
    "lm loss",
    "train_loss",
    "train/loss",
    "avg_loss",
    "Train Loss",
    "total_loss",
    "running loss",
]
LOSS_SEPS = [" ", ": ", "=", " = ", " is ", ":", " : "]
FILLERS = [" | ", ", ", " ", "\t", " - ", "; ", "  "]
EXTRAS = [
    "lr 0.01",
    "lr: 1.000E-04",
    "grad_norm: 1.25",
    "time: 0.52s",
    "12.5 samples/s",
    "mem 31.5GB",
    "ETA 0:10:07",
    "loss scale: 4096.0",
    "acc@1 0.93",
    "tokens/s 10234",
]


def _value_text(value: float, form: int) -> str:
    text = [f"{value:.4f}", f"{value:.6g}", f"{value:.3E}", f"{value:.5e}"][form % 4]
    wrap = [
        "{}",
        "Tensor(shape=[], dtype=Float32, value= {})",
        "tensor({})",
        "tensor({}, device='cuda:0', grad_fn=<NllLossBackward0>)",
        "[{}]",
        "np.float32({})",
        "({})",
    ][form // 4 % 7]
    return wrap.format(text), text


@st.composite
def keyword_lines(draw):
    n = draw(st.integers(min_value=0, max_value=10**7))
    total = draw(st.one_of(st.none(), st.integers(min_value=n, max_value=10**8)))
    kw = draw(st.sampled_from(CASES))(draw(st.sampled_from(KEYWORDS)))
    counter_body = f"{kw}{draw(st.sampled_from(KEY_SEPS))}"
    number = f"{n}/{total}" if total is not None else str(n)
    number = draw(st.sampled_from(["{}", "[{}]", "({})", "[ {} ]"])).format(number)
    counter = counter_body + number
    counter = draw(st.sampled_from(["{}", "[{}]", "({})"])).format(counter)
    value = draw(st.floats(min_value=1e-6, max_value=1e4, allow_nan=False))
    shown, text = _value_text(value, draw(st.integers(min_value=0, max_value=27)))
    loss = f"{draw(st.sampled_from(LOSS_KEYS))}{draw(st.sampled_from(LOSS_SEPS))}{shown}"
    epoch = draw(st.one_of(st.none(), st.integers(min_value=0, max_value=999)))
    parts = [counter, loss] if draw(st.booleans()) else [loss, counter]
    if epoch is not None:
        ep = draw(
            st.sampled_from(["epoch {}", "Epoch: {}", "EPOCH={}", "Epoch [{}/1000]", "epoch({})", "[Epoch {}]"])
        ).format(epoch)
        parts.insert(0, ep)
    for extra in draw(st.lists(st.sampled_from(EXTRAS), max_size=3)):
        parts.insert(draw(st.integers(min_value=0, max_value=len(parts))), extra)
    line = draw(st.sampled_from(PREFIXES)) + "".join(p + draw(st.sampled_from(FILLERS)) for p in parts[:-1]) + parts[-1]
    in_epoch = epoch is not None and "global" not in kw.lower()
    return line, ((epoch if in_epoch else None), n), float(text)


@settings(max_examples=examples(500), deadline=None)
@given(keyword_lines())
def test_generated_keyword_lines_parse_to_their_step_and_loss(case):
    line, progress, loss = case
    m = parse_line(line)
    assert m is not None and m.progress == progress, line
    assert m.loss == pytest.approx(loss, rel=1e-12), line


@st.composite
def position_lines(draw):
    epoch = draw(st.integers(min_value=0, max_value=500))
    size = draw(st.integers(min_value=1, max_value=10**7))
    n = draw(st.integers(min_value=0, max_value=size))
    pct = draw(st.booleans())
    ep = draw(st.sampled_from(["Train Epoch: {}", "Epoch {}", "epoch: [{}]", "Epoch: [{}]", "EPOCH {}"])).format(epoch)
    pos = (
        f"[{n}/{size} ({100.0 * n / size:.0f}%)]"
        if pct
        else draw(st.sampled_from(["[{}/{}]", "[ {}/{}]", "[{} / {}]"])).format(n, size)
    )
    value = draw(st.floats(min_value=1e-6, max_value=1e4, allow_nan=False))
    shown, text = _value_text(value, draw(st.integers(min_value=0, max_value=27)))
    loss = f"{draw(st.sampled_from(LOSS_KEYS))}{draw(st.sampled_from(LOSS_SEPS))}{shown}"
    line = (
        draw(st.sampled_from(PREFIXES))
        + ep
        + draw(st.sampled_from([" ", "", "\t"]))
        + pos
        + draw(st.sampled_from(FILLERS))
        + loss
    )
    return line, (epoch, n), float(text), size, "samples" if pct else None


@settings(max_examples=examples(300), deadline=None)
@given(position_lines())
def test_generated_epoch_position_lines_parse_to_their_position(case):
    line, progress, loss, size, unit = case
    m = parse_line(line)
    assert m is not None and m.progress == progress, line
    assert m.loss == pytest.approx(loss, rel=1e-12) and m.steps_per_epoch == size and m.unit == unit


JSON_COUNTERS = ["step", "global_step", "iter", "iteration", "trainer/global_step", "Step", "train/global_step"]
JSON_LOSSES = ["loss", "train_loss", "train/loss", "lm loss", "Loss", "train/loss_step", "avg_loss"]


@settings(max_examples=examples(300), deadline=None)
@given(
    st.sampled_from(JSON_COUNTERS),
    st.sampled_from(JSON_LOSSES),
    st.integers(min_value=0, max_value=10**9),
    st.floats(min_value=-1e6, max_value=1e6, allow_nan=False),
    st.booleans(),
    st.sampled_from(PREFIXES),
    st.dictionaries(
        st.sampled_from(["lr", "grad_norm", "epoch", "tokens", "name"]),
        st.one_of(st.integers(0, 100), st.floats(0, 1), st.text(max_size=5)),
        max_size=3,
    ),
)
def test_generated_json_lines_parse_to_their_step_and_loss(counter, loss_key, n, loss, python, prefix, extra):
    obj = dict(extra)
    obj.update({counter: n, loss_key: loss})
    line = prefix + (repr(obj) if python else json.dumps(obj))
    m = parse_line(line)
    assert m is not None and m.progress == (None, n) and m.loss == pytest.approx(loss), line


# Lines that are not progress, by class, with random numbers and prefixes: none may parse as a step.
_n = st.integers(min_value=0, max_value=10**6).map(str)
_f = st.floats(min_value=0, max_value=1e5, allow_nan=False).map(lambda v: f"{v:.4g}")
CONFIG_KEYS = [
    "warmup_steps",
    "max_steps",
    "total_steps",
    "num_steps",
    "step_size",
    "save_steps",
    "eval_steps",
    "logging_steps",
    "max_iter",
    "iters_per_epoch",
    "batch_size",
    "global_batch_size",
    "micro_batch_size",
    "loss_scale",
    "loss_type",
    "lr",
    "weight_decay",
    "epochs",
    "num_batches",
    "steps",
    "iterations",
    "loss_weight",
    "init_loss_scale",
]


@st.composite
def config_dumps(draw):
    pairs = draw(st.lists(st.tuples(st.sampled_from(CONFIG_KEYS), st.one_of(_n, _f)), min_size=1, max_size=6))
    form = draw(st.integers(min_value=0, max_value=3))
    if form == 0:
        return ", ".join(f"{k}: {v}" for k, v in pairs)
    if form == 1:
        return "Namespace(" + ", ".join(f"{k}={v}" for k, v in pairs) + ")"
    if form == 2:
        return json.dumps({k: float(v) for k, v in pairs})
    return "\n".join(f"  {k}: {v}" for k, v in pairs).split("\n")[0]


@st.composite
def counters_without_a_loss(draw):
    n = draw(_n)
    kw = draw(st.sampled_from(CASES))(
        draw(st.sampled_from(["step", "iter", "iteration", "batch", "global_step", "it"]))
    )
    return draw(
        st.sampled_from(
            [
                "saving at {kw} {n}",
                "checkpoint saved at {kw} {n}",
                "Saving checkpoint at {kw} {n} to /ckpt/{kw}_{n}.ckpt",
                "The {kw} {n} of graph compile took long",
                "{kw} {n}: evaluating",
                "{kw} {n} took 3.2 s",
                "reached {kw}={n}, lr 0.01",
                "[{kw} {n}] synchronising",
                "Loss went down at {kw} {n}",
            ]
        )
    ).format(kw=kw, n=n)


@st.composite
def losses_without_a_counter(draw):
    v = draw(_f)
    return draw(
        st.sampled_from(
            [
                "Test set: Average loss: {v}, Accuracy: 9838/10000 (98%)",
                "loss scale: {v}, overflow: False",
                "val_loss improved to {v}",
                "Epoch {n}: val_loss {v}",
                "eval loss {v} at epoch {n}",
                "best loss so far {v}",
                "step {n}.5 loss {v}",
                "{{'loss': {v}, 'learning_rate': 5e-05, 'epoch': 0.5}}",
            ]
        )
    ).format(v=v, n=draw(_n))


@st.composite
def noise_lines(draw):
    a, b, c, d = (draw(st.integers(min_value=0, max_value=255)) for _ in range(4))
    return draw(
        st.sampled_from(
            [
                "2026-11-{a:02d} 07:21:16,123 starting the data loader",
                "connecting to {a}.{b}.{c}.{d}:8118 (attempt 1)",
                "MS_SCHED_HOST={a}.{b}.{c}.{d} step {a}.{b}.{c}.{d} loss {b}.{c}.{d}",
                "mindspore {a}.{b}.{c}, CANN 8.0.RC2, python 3.{b}.{c}",
                "torch=={a}.{b}.{c}+cu118 it {a}.{b}.{c} loss {c}",
                "step {a}:{b}:{c} loss {d}",
                "step {a}-{b}-{c} loss {d}",
                "iter {a}.{b} loss {c}",
                "step {a}% loss {b}",
                "Traceback (most recent call last):",
                '  File "/usr/lib/python3.{a}/site-packages/mindspore/train/model.py", line {b}, in train_step',
                "    loss = self.network(*inputs)",
                "    optimizer.step()",
                "RuntimeError: step {a} failed with code {b}",
                "[WARNING] ME({a}:{b},MainProcess):2026-11-25-13:00:01.123.456 [mindspore/train/model.py:{c}] step {d}",
                "[rank{a}]:",
                "INFO:root:",
                "[{a},{b}]<stderr>:",
                "W1126 07:21:16.{a:06d} {b} train.py:{c}]",
                " {a}%|####5     | {b}/{c} [00:10<00:12, 80.12it/s]",
                "Downloading: {a}/{b} MB",
            ]
        )
    ).format(a=a, b=b, c=c, d=d)


@settings(max_examples=examples(600), deadline=None)
@given(
    st.sampled_from(PREFIXES),
    st.one_of(config_dumps(), counters_without_a_loss(), losses_without_a_counter(), noise_lines()),
)
def test_generated_non_progress_lines_never_parse_as_a_step(prefix, body):
    line = prefix + body
    m = parse_line(line)
    assert m is None or m.progress is None, (line, m)


# Lines built to make regexes backtrack (long runs of spaces, brackets, digits, repeated keywords), each cut
# to the parser's 4096-character bound.  A polynomial regex takes seconds to hours on some of them (before
# this parser a `step` followed by 1,000 spaces took 11 s); every one must parse in linear time.
_N = 4096
BOMBS = {
    "step, spaces": "step" + " " * _N,
    "step:, spaces": "step:" + " " * _N + "x loss 1",
    "loss, spaces": "step 3 loss" + " " * _N,
    "epoch, spaces": "epoch" + " " * _N + "x loss 1",
    "epoch n, spaces": "epoch 1" + " " * _N + "x loss 1",
    "position, spaces": "epoch 1 [" + " " * _N,
    "brackets": "step 3 loss " + "[ " * _N,
    "parens": "step 3 loss " + "( " * _N,
    "tensors": "step 3 loss " + "tensor( " * _N,
    "steps": "step " * _N + "loss 1",
    "losses": "step 1 " + "loss " * _N,
    "epochs": "epoch " * _N + "loss 1",
    "digits, letter": "step 3 loss " + "1" * _N + "x",
    "digits, dot": "step 3 loss 1." + "1" * _N + "x",
    "slashes": "step 1 " + "1/" * _N,
    "tqdm": "| 1/2 [" * _N + " loss 1",
    "braces": "{" * _N + "} loss",
    "LossMonitor, spaces": "epoch: 1 step: 1, loss is" + " " * _N + "x",
    "LossMonitor, paren": "epoch: 1 step: 1, loss is (" + " " * _N,
    "MFLossMonitor, spaces": "{ Epoch:[ 1/ 2], step:[ 1/ 2], loss:" + " " * _N,
    "samples/s/p, digits": "1" * _N + "x samples/s/p",
    "qualifiers": ("x" * 23 + "_loss 1 ") * _N,
    "dict": "{'step': 1, 'loss': " + "[" * 900 + "]" * 900 + "}",
}


@pytest.mark.parametrize("name", sorted(BOMBS))
def test_lines_made_to_backtrack_parse_in_linear_time(name):
    line = BOMBS[name][:_N]
    start = time.process_time()  # this process's CPU: other work on the machine does not count
    parse_line(line)
    assert time.process_time() - start < 0.25, name  # linear: ~10 ms here


# ---- what the counts become ----


def _records(lines, deriver=None, start=0.0, every=1.0):
    d = deriver or RankDeriver(rank=0)
    out = []
    for i, line in enumerate(lines):
        out += d.feed([parse_line(line)], start + i * every)
    return out


def test_a_sample_counter_keeps_its_position_over_the_run_and_its_rate():
    lines = [f"Train Epoch: {e} [{n}/1920 ({100 * n // 1920}%)]\tLoss: 0.5" for e in (1, 2) for n in (0, 640, 1280)]
    recs = _records(lines)  # a line a second, 640 samples apart
    assert [r["global_step"] for r in recs] == [0, 640, 1280, 1920, 2560, 3200]
    assert all(r["unit"] == "samples" for r in recs)
    assert recs[2]["samples_per_s"] == pytest.approx(640.0) and "step_time_ms" not in recs[2]
    prog = Progress()
    prog.extend(recs)
    snap = snapshot("j", "running", 6.0, 1, {0: "h"}, prog, {0: 5.5})
    row = snap.to_json()["ranks"][0]
    assert (row["step"], row["unit"], row["samples_per_s"], row["step_time_ms"]) == (
        3200,
        "samples",
        pytest.approx(640.0),
        None,
    )


def test_a_sample_counter_with_a_known_budget_has_an_eta_from_its_rate():
    d = RankDeriver(rank=0)
    d.feed([parse_line('MSLAUNCH_METRIC {"epochs": 2}')], 0.0)
    recs = _records([f"Train Epoch: 1 [{n}/1000 ({n // 10}%)]\tLoss: 0.5" for n in (0, 100, 200)], d)
    assert recs[-1]["total_steps"] == 2000
    prog = Progress()
    prog.extend(recs)
    snap = snapshot("j", "running", 3.0, 1, {0: "h"}, prog, {0: 2.5})
    assert snap.eta_s == pytest.approx((2000 - 200) / 100.0)


def test_an_epoch_and_a_step_that_counts_over_the_run():
    recs = _records([f"Epoch {e} Step {s} Loss 0.5" for e, s in ((1, 1), (1, 2), (2, 3), (2, 4))])
    assert [r["global_step"] for r in recs] == [1, 2, 3, 4]  # epoch 2 went on from 2: the step counts over the run
    recs = _records([f"Epoch {e} Step {s} Loss 0.5" for e, s in ((1, 1), (1, 2), (2, 1), (2, 2))])
    assert [r["global_step"] for r in recs] == [1, 2, 3, 4]  # started again: within the epoch


def test_steps_of_text_lines_give_derived_step_times():
    recs = _records([f"iter {i} | loss {1 / i:.4f}" for i in range(1, 5)], every=0.5)
    assert [r["global_step"] for r in recs] == [1, 2, 3, 4] and recs[-1]["step_time_ms"] == pytest.approx(500.0)
    assert not math.isnan(recs[-1]["loss"]) and recs[-1]["source"] == "text"
