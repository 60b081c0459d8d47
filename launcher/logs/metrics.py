"""Training metrics from log lines: pure parsing, no I/O.

:func:`parse_line` recognises the lines MindSpore users print (anywhere in the line, so a
logger's or mslaunch's prefix does not matter) and returns a :class:`Metric`, or None:

=================  ==========================================================================
``lossmonitor``    ``epoch: 1 step: 40, loss is 0.09236499`` (MindSpore ``LossMonitor``; the step
                   counts within the epoch).  ``... loss is NAN or INF ...`` (its error) is an event.
                   The same with other separators: MindSpore's tutorials print
                   ``epoch: 0, step: 10, loss is 2.30`` (epochs and steps from 0), the model zoo
                   ``epoch: 1, current epoch percent: 0.500, step: 100, loss is (Tensor(..., value= 7.4), ...)``.
``timemonitor``    ``Train epoch time: 5312.412 ms, per step time: 132.810 ms`` (``TimeMonitor``;
                   the mode word may be empty or ``Eval``; ``(data time: ...)`` may follow).
``mindformers``    ``{ Epoch:[  1/  2], step:[    2/   19], loss: 10.649, per_step_time: 103328ms,
                   lr: ...`` (``MFLossMonitor``; also ``loss:[10.649/10.700]``) and its progress line
                   ``   5.3% |####   | 12.5 samples/s/p  0:10:07 }``.
``eval``           ``Eval result: epoch 1, metrics: {'accuracy': 0.91}`` (``LossMonitor`` under
                   ``Model.fit``) and ``accuracy: 0.9760`` (the reference trainer).
``trainer``        the reference trainer's ``epoch 1 throughput: 18.8 img/s per rank, 37.5 img/s
                   total (2 ranks)``, ``data: ...: 93 batches of 32 per pass`` (the batch size) and
                   ``epoch: 1 step: 3. Invalid loss nan, terminating training.`` (an event).
``mslaunch``       ``MSLAUNCH_METRIC {json object}``: the machine-readable line any script can print.
``text``           any other line the progress grammar reads (:mod:`launcher.logs.grammar`): a counter
                   (``step``, ``iter``, ``iteration``, ``it``, ``batch``, ``global_step``, ... in
                   any case, with or without ``:``/``=``/brackets and a ``/total``) with a loss
                   anywhere in the line (``iter 3 | loss 0.6667``, ``[step 3] loss: 0.6667``,
                   ``Epoch [1/10], Step [100/600], Loss: 0.2154``, Megatron's ``iteration 10/ 1000
                   | ... lm loss: 1.0E+01 |``), PyTorch's MNIST line ``Train Epoch: 1 [640/60000
                   (1%)]\tLoss: 0.2154`` (``unit`` ``samples``); ``step 10/100`` (a total) needs no loss.
``json``           a JSON object (or a Python dict's repr) with a counter and a loss key, without
                   the prefix: ``{"step": 10, "loss": 0.3}``, ``{"global_step": 5, "train/loss": 0.3}``.

A counter alone (``saving at step 500``; ``warmup_steps: 100`` is not even a counter) is not a step
line; steps may count from 0 or 1 (see :attr:`Metric.progress`).
=================  ==========================================================================

``MSLAUNCH_METRIC`` keys (all optional; unknown keys are ignored, wrong types drop the key):
``step`` (int, counted from 1 over the whole run unless ``epoch`` is given with ``steps_per_epoch``),
``epoch`` (int), ``loss`` (number; ``"nan"``/``"inf"`` strings are accepted), ``step_time_ms``
(number), ``samples_per_s`` (number, this rank), ``batch_size`` (int, per rank), ``epochs`` (int,
total), ``steps_per_epoch`` (int), ``total_steps`` (int, the whole run), ``eval`` (object of
numbers), ``ckpt_ms`` (number: how long the last checkpoint write took; a line with only this is
an ``info`` metric), ``ckpt_failed`` (text: a checkpoint could not be written, why; the program
trains on: an ``info`` metric with ``event="ckpt_failed"``, an event of the job).  Example::

    print('MSLAUNCH_METRIC ' + json.dumps({"step": 12, "loss": 0.42, "step_time_ms": 130.5}), flush=True)

A loss that is NaN or infinite makes a ``step`` metric with ``event="nonfinite_loss"`` and
``loss=None`` (its text in ``loss_text``).
"""

from __future__ import annotations

import ast
import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Dict, Optional, Tuple

from launcher.logs.grammar import FLOAT_KEYS, INT_KEYS, NUM, finite, loss_fields, number, read_progress

__all__ = ["Metric", "parse_line", "METRIC_PREFIX"]

METRIC_PREFIX = "MSLAUNCH_METRIC"
_MAX_LINE = 4096  # longer lines are not metric lines (and regexes stay cheap)
MAX_NOTE = 500  # characters kept of a ckpt_failed text

_SEP = r"\s*(?:[,;|]\s*)?"  # one \s* per whitespace run: no polynomial backtracking on long lines
_EPOCH_STEP = (
    r"(?<![\w.])epoch:\s*(\d+)" + _SEP + r"(?:current epoch percent:\s*[\d.]+" + _SEP + r")?step:\s*(\d+)" + _SEP
)
_TENSOR = r"(?:\(\s*)?(?:Tensor\(shape=\[[^\]]*\],\s*dtype=\w+,\s*value=\s*)?"
_LOSS_RE = re.compile(_EPOCH_STEP + r"loss is\s*" + _TENSOR + r"((?:\[\s*)?" + NUM + r")", re.IGNORECASE)
_LOSS_NONFINITE_RE = re.compile(_EPOCH_STEP + r"loss is NAN or INF")
_TIME_RE = re.compile(r"(?:^|[^\w])(Train |Eval |)epoch time: ([\d.]+) ms, per step time: ([\d.]+) ms")
_MF_RE = re.compile(r"\{ Epoch:\[\s*(\d+)/\s*(\d+)\], step:\[\s*(\d+)/\s*(\d+)\], loss:\s*(?:\[\s*)?(" + NUM + r")")
_MF_TIME_RE = re.compile(r"per_step_time: (\d+(?:\.\d+)?)ms")
_MF_RATE_RE = re.compile(r"(?<![\d.])(\d+(?:\.\d+)?) samples/s/p")  # from a number's start: linear on digit runs
_EVAL_RE = re.compile(r"Eval result: epoch (\d+), metrics: (\{.*\})")
_ACC_RE = re.compile(r"^accuracy: (" + NUM + r")\s*$")
_THRU_RE = re.compile(r"epoch (\d+) throughput: ([\d.]+) img/s per rank, ([\d.]+) img/s total \((\d+) ranks?\)")
_DATA_RE = re.compile(r"^data: .*: (\d+) batches of (\d+) per pass")
_INVALID_RE = re.compile(r"epoch: (\d+) step: (\d+)\. Invalid loss (\S+)")


@dataclass(frozen=True)
class Metric:
    """What one log line says.

    Attributes:
        kind: ``step`` (a training step: loss and/or timing), ``epoch`` (end of an epoch: timing
            or throughput), ``eval`` (evaluation results), ``info`` (batch size or step budget
            only), ``event`` (no numbers: e.g. the loss became NaN).
        source: the format: ``lossmonitor``, ``timemonitor``, ``mindformers``, ``eval``,
            ``trainer``, ``mslaunch``, ``text``, ``json``.
        epoch: the epoch (from 1), when the line says.
        step: the step as printed (within the epoch when ``step_in_epoch``).
        step_in_epoch: True when ``step`` counts within ``epoch``.
        epochs: total epochs, when the line says.
        steps_per_epoch: steps per epoch, when the line says.
        total_steps: steps of the whole run, when the line says.
        loss: the loss (None when absent or not finite).
        loss_text: the loss as printed when it was not finite.
        step_time_ms: time per step in ms, when the line says.
        samples_per_s: this rank's samples (images, sequences) per second, when the line says.
        batch_size: samples per step on this rank, when the line says.
        eval: evaluation metrics (name -> number).
        event: ``nonfinite_loss`` when the loss is NaN or infinite; ``ckpt_failed`` when the line
            says a checkpoint could not be written (why in :attr:`ckpt_failed`).
        ckpt_ms: how long the rank's last checkpoint write took (``MSLAUNCH_METRIC`` only: the
            checkpoint cost of :mod:`launcher.planning.job.ckptinterval`).
        ckpt_failed: why a checkpoint could not be written (``MSLAUNCH_METRIC`` only).
        unit: what ``step`` counts when it is not steps: ``samples`` (PyTorch's MNIST line
            ``Train Epoch: 1 [640/60000 (1%)]``: ``step`` is the sample position within the epoch
            and ``steps_per_epoch`` the dataset's size).

    A step line's :attr:`progress` is what hang detection compares: a new value is progress.
    """

    kind: str
    source: str
    epoch: Optional[int] = None
    step: Optional[int] = None
    step_in_epoch: bool = False
    epochs: Optional[int] = None
    steps_per_epoch: Optional[int] = None
    total_steps: Optional[int] = None
    loss: Optional[float] = None
    loss_text: Optional[str] = None
    step_time_ms: Optional[float] = None
    samples_per_s: Optional[float] = None
    batch_size: Optional[int] = None
    eval: Dict[str, float] = field(default_factory=dict)
    event: Optional[str] = None
    unit: Optional[str] = None
    ckpt_ms: Optional[float] = None
    ckpt_failed: Optional[str] = None

    @property
    def progress(self) -> Optional[Tuple[Optional[int], int]]:
        """``(epoch, step)`` of a step line (epoch None when the step counts over the whole run),
        else None.  Steps may count from 0 (MindSpore's tutorials) or 1."""
        if self.kind != "step" or self.step is None:
            return None
        return (self.epoch if self.step_in_epoch else None, self.step)


def _eval_dict(obj: Any) -> Dict[str, float]:
    out: Dict[str, float] = {}
    if isinstance(obj, dict):
        for key, value in obj.items():
            num = finite(value)
            if num is not None:
                out[str(key)] = num
    return out


def _parse_mslaunch(payload: str) -> Optional[Metric]:
    try:
        obj = json.loads(payload)
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict):
        return None
    kw: Dict[str, Any] = {}
    for key in INT_KEYS:
        value = obj.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            kw[key] = value
    for key in FLOAT_KEYS:
        num = finite(obj.get(key))
        if num is not None and num >= 0:
            kw[key] = num
    ckpt = finite(obj.get("ckpt_ms"))
    if ckpt is not None and ckpt >= 0:
        kw["ckpt_ms"] = ckpt
    failed = obj.get("ckpt_failed")
    if isinstance(failed, str) and failed.strip():
        kw["ckpt_failed"], kw["event"] = " ".join(failed.split())[:MAX_NOTE], "ckpt_failed"
    loss = obj.get("loss")
    if isinstance(loss, float) and not math.isfinite(loss):
        kw.update(loss_fields(repr(loss)))
    elif finite(loss) is not None:
        kw["loss"] = finite(loss)
    elif isinstance(loss, str):
        kw.update(loss_fields(loss))
    ev = _eval_dict(obj.get("eval"))
    if ev:
        kw["eval"] = ev
    if "step" in kw and "epoch" in kw and "steps_per_epoch" in kw:
        kw["step_in_epoch"] = True
    if "loss" in kw or "loss_text" in kw or "step" in kw or "step_time_ms" in kw or "samples_per_s" in kw:
        kind = "step"
    elif ev:
        kind = "eval"
    elif kw:
        kind = "info"
    else:
        return None
    return Metric(kind=kind, source="mslaunch", **kw)


def parse_line(line: str) -> Optional[Metric]:
    """The metric a log line carries, or None.  Pure; never raises on any text.

    Args:
        line: one line of a rank's output (without its newline; a trailing ``\\r`` is fine; a line
            a progress bar redrew with ``\\r`` is read from its last drawing).

    Returns:
        The :class:`Metric`, or None when the line is not a metric line.
    """
    try:
        return _parse(line)
    except (ValueError, OverflowError, TypeError, RecursionError, MemoryError):
        return None  # e.g. a number too large for a float: not a metric we can use


def _parse(line: str) -> Optional[Metric]:
    if len(line) > _MAX_LINE:
        return None
    if "\r" in line:
        line = line.rstrip("\r").rpartition("\r")[2]
    if METRIC_PREFIX in line:
        idx = line.find(METRIC_PREFIX + " ")
        if idx >= 0:
            return _parse_mslaunch(line[idx + len(METRIC_PREFIX) + 1 :].strip())
        return None
    for parse in (_parse_epoch_line, _parse_mindformers, _parse_result_line):
        metric = parse(line)
        if metric is not None:
            return metric
    fields = read_progress(line)
    return Metric(kind="step", **fields) if fields is not None else None


def _parse_epoch_line(line: str) -> Optional[Metric]:
    """LossMonitor / TimeMonitor lines and the trainer's invalid-loss and throughput lines."""
    if "epoch" not in line and "Epoch" not in line and "EPOCH" not in line:
        return None
    m = _LOSS_NONFINITE_RE.search(line)
    if m:
        return Metric(
            kind="step",
            source="lossmonitor",
            epoch=int(m.group(1)),
            step=int(m.group(2)),
            step_in_epoch=True,
            loss_text="NAN or INF",
            event="nonfinite_loss",
        )
    m = _LOSS_RE.search(line)
    if m:
        fields = loss_fields(m.group(3))
        if fields:
            return Metric(
                kind="step",
                source="lossmonitor",
                epoch=int(m.group(1)),
                step=int(m.group(2)),
                step_in_epoch=True,
                **fields,
            )
    m = _INVALID_RE.search(line)
    if m:
        return Metric(
            kind="step",
            source="trainer",
            epoch=int(m.group(1)),
            step=int(m.group(2)),
            step_in_epoch=True,
            loss_text=m.group(3).rstrip(","),
            event="nonfinite_loss",
        )
    m = _TIME_RE.search(line)
    if m:
        return Metric(kind="epoch", source="timemonitor", step_time_ms=float(m.group(3)))
    m = _THRU_RE.search(line)
    if m:
        return Metric(kind="epoch", source="trainer", epoch=int(m.group(1)), samples_per_s=float(m.group(2)))
    return None


def _parse_mindformers(line: str) -> Optional[Metric]:
    """MindFormers' step lines and its samples/s/p lines."""
    if "Epoch:[" in line:
        m = _MF_RE.search(line)
        if m:
            fields = loss_fields(m.group(5))
            t = _MF_TIME_RE.search(line)
            return Metric(
                kind="step",
                source="mindformers",
                epoch=int(m.group(1)),
                epochs=int(m.group(2)),
                step=int(m.group(3)),
                steps_per_epoch=int(m.group(4)),
                step_in_epoch=True,
                step_time_ms=float(t.group(1)) if t else None,
                **fields,
            )
    if "samples/s/p" in line:
        m = _MF_RATE_RE.search(line)
        if m:
            return Metric(kind="step", source="mindformers", samples_per_s=float(m.group(1)))
    return None


def _parse_result_line(line: str) -> Optional[Metric]:
    """Eval results (the callback's and the trainer's ``accuracy:``) and the trainer's ``data:`` line."""
    if "Eval result" in line:
        m = _EVAL_RE.search(line)
        if m:
            try:
                obj = ast.literal_eval(m.group(2))
            except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
                obj = None
            ev = _eval_dict(obj)
            if ev:
                return Metric(kind="eval", source="eval", epoch=int(m.group(1)), eval=ev)
    if line.startswith("accuracy: "):
        m = _ACC_RE.match(line)
        if m:
            value = number(m.group(1))
            if value is not None and math.isfinite(value):
                return Metric(kind="eval", source="trainer", eval={"accuracy": value})
    if line.startswith("data: "):
        m = _DATA_RE.match(line)
        if m:
            return Metric(kind="info", source="trainer", batch_size=int(m.group(2)))
    return None
