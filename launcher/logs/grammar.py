"""The progress grammar: a training step read from any reasonable line.  Pure; no I/O.

:func:`read_progress` recognises a line by its parts, not by a list of whole formats.  A line is a
step line when it has a **counter** and (unless the counter has a total) a **loss** anywhere in it;
everything else on the line (a timestamp, a logger's name, ``[rank0]:``, learning rates, timings)
is ignored::

    step line := ... counter ... loss ...     (in either order; a counter with a total needs no loss)
               | ... epoch position ... loss ...
               | ... bar-counter ... loss ...
               | JSON object with a counter key and a loss key

    counter   := keyword sep? open? number ("/" total)?
    keyword   := [global|train|training|cur|current][" "|"_"]? (step | iteration | iter | it | batch)
                 any case, a whole word: not ``warmup_steps``, ``max_steps``, ``step_size``, ``StepLR``;
               | (steps | iters | iterations) followed by ":" or "=" (DeepSpeed's ``steps: 100 loss: 1.2``)
    sep       := ":" | "=" | "#"            open := "[" | "("
    number    := digits, not followed by a letter, "%", or [.:,-] and a digit (not ``07:21``, ``1.5``,
                 ``10.0.0.1``, ``2026-11``)
    epoch     := "epoch" sep? open? number ("/" total)? close?
    position  := "[" n "/" N ("(" p "%)")? "]"  right after an epoch (PyTorch's MNIST example:
                 ``Train Epoch: 1 [640/60000 (1%)]``; with the percent the counter counts samples)
    bar-counter := "|" n "/" N "[" elapsed    (a tqdm bar, e.g. Lightning's, with a loss postfix)
                 | n "/" N " [" "=>." "]"    (a Keras bar: ``32/1875 [>....] - ETA: 1:23 - loss: 2.30``)
    loss      := loss-key sep? ("is")? value
    loss-key  := "loss" as a word or the last part of one (``loss``, ``Loss``, ``lm loss``,
                 ``train_loss``, ``train/loss``, ``avg_loss``, ``train_loss_step``), not an
                 evaluation's (``val_loss``, ``eval loss``, ``test_loss``) nor ``loss_scale``
    value     := number | nan | inf | a tensor's repr (``Tensor(shape=[], dtype=Float32, value= 0.67)``,
                 ``tensor(0.67, device='cuda:0')``, ``np.float32(0.67)``), optionally in brackets

The epoch may be anywhere in the line.  With an epoch the counter counts within it (``Epoch [1/5],
Step [100/600]``), unless its keyword says ``global``.  When a line has several losses, the main one
wins (``loss``, ``train_loss``, ``lm loss``, ... over ``aux_loss``); else the first.

A counter without a total and without a loss is not progress (``saving at step 500``,
``The step 3 of graph compile took long``); a loss without a counter is not either (``Test set:
Average loss: 0.05``).

JSON objects (without the ``MSLAUNCH_METRIC`` prefix; Python dict reprs too): a counter key
(``step``, ``global_step``, ``iter``, ``iteration``, ``it``, ``batch``, ``trainer/global_step``, ...)
with an integer and a loss key (``loss``, ``train_loss``, ``train/loss``, ``lm loss``, ...) with a
number; ``epoch`` when it is an integer; the keys ``MSLAUNCH_METRIC`` reads
(:mod:`launcher.logs.metrics`) too.  The step counts over the whole run (as ``MSLAUNCH_METRIC``).
"""

from __future__ import annotations

import ast
import json
import math
import re
from typing import Any, Dict, Iterator, Optional, Tuple

__all__ = ["FLOAT_KEYS", "INT_KEYS", "NUM", "finite", "loss_fields", "number", "read_progress"]

#: A number as scripts print it, or NaN/Inf in their usual spellings (case-insensitive).
NUM = r"[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|NaN|NAN|inf|Inf|INF|Infinity)"
#: Keys read from JSON objects as integers / as non-negative numbers.
INT_KEYS = ("step", "epoch", "batch_size", "epochs", "steps_per_epoch", "total_steps")
FLOAT_KEYS = ("step_time_ms", "samples_per_s")

# Whitespace runs are matched by one ``\s*`` only (never two in a row around an optional token): a line of
# thousands of spaces must not make a regex backtrack polynomially (the parser runs on every line).
_END = r"(?![\w%]|[.:,\-]\d)"  # a count ends here: not 1.5, 07:21, 10.0.0.1, 1,000, 2026-11, 45%
_COUNTER_RE = re.compile(
    r"(?<![\w.\-/])(?:(global|train|training|cur|current)[ _]?)?"
    r"(?:(?:step|iteration|iter|it|batch)(?!\w)\s*(?:[:=#]\s*)?|(?:steps|iterations|iters)\s*[:=]\s*)"
    r"(?:[\[(]\s*)?(?:#\s*)?(\d+)" + _END + r"(?:\s*/\s*(\d+)" + _END + r")?",
    re.IGNORECASE,
)
_EPOCH_RE = re.compile(
    r"(?<![\w.\-/])epoch(?!\w)\s*(?:[:=#]\s*)?(?:[\[(]\s*)?(\d+)"
    + _END
    + r"(?:\s*/\s*(\d+)"
    + _END
    + r")?(?:\s*[\])])?",
    re.IGNORECASE,
)
_POSITION_RE = re.compile(r"\s*(?:[,:|-]\s*)?\[\s*(\d+)\s*/\s*(\d+)\s*(?:(\(\s*\d+(?:\.\d+)?\s*%\s*\))\s*)?\]")
_SLASH_COUNT_RE = re.compile(r"\d\s*/\s*\d")
_BAR_RE = re.compile(r"\|\s*(\d+)/(\d+)\s*\[\d+:\d|(?<!\S)(\d+)/(\d+) \[[=>.]*\]")
_VALUE = (
    r"(?:[(\[]\s*)*(?:(?:tensor|array|(?:np\.)?float(?:16|32|64)?)\(\s*(?:shape=\[[^\]]*\],\s*dtype=\w+,\s*value=\s*)?(?:\[\s*)*)?"
    r"(" + NUM + r")(?![\w]|\.\d)"
)
_EVAL_WORDS = ("val", "valid", "validation", "eval", "evaluation", "test", "dev")
_LOSS_RE = re.compile(
    r"(?<![A-Za-z0-9])" + "".join(f"(?<!{w}[_ /.-])" for w in _EVAL_WORDS) + r"loss(?:_step)?(?![A-Za-z0-9_])"
    r"\s*(?:[:=]\s*)?(?:is\s+)?" + _VALUE,
    re.IGNORECASE,
)
#: Words that make a loss the main one when they qualify it (``lm loss``, ``train_loss``).
_MAIN_QUALIFIERS = frozenset(
    (
        "train",
        "training",
        "lm",
        "avg",
        "average",
        "mean",
        "total",
        "running",
        "global",
        "batch",
        "smoothed",
        "reduced",
        "overall",
        "step",
        "the",
        "current",
        "cur",
    )
)
_QUALIFIER_RE = re.compile(r"([A-Za-z0-9]+)([_ /.-])$")
_JSON_COUNTER_KEYS = frozenset(
    (
        "step",
        "global_step",
        "globalstep",
        "iter",
        "iteration",
        "it",
        "batch",
        "train_step",
        "trainer_global_step",
        "train_global_step",
        "train_iter",
        "train_iteration",
    )
)
_JSON_LOSS_KEY_RE = re.compile(r"^(?:([a-z0-9]+)_)*loss(?:_step)?$")


def number(text: str) -> Optional[float]:
    """``text`` (a printed number, maybe after ``[``) as a float, or None."""
    try:
        return float(text.strip().lstrip("["))
    except ValueError:
        return None


def loss_fields(text: str) -> Dict[str, Any]:
    """A printed loss as Metric fields: ``{"loss": x}``, or ``loss_text`` and ``event="nonfinite_loss"``
    for NaN/Inf; ``{}`` when ``text`` is not a number."""
    value = number(text)
    if value is None:
        return {}
    if math.isfinite(value):
        return {"loss": value}
    return {"loss_text": text.strip().lstrip("[").strip(), "event": "nonfinite_loss"}


def finite(value: Any) -> Optional[float]:
    """``value`` as a finite float, or None (bools, strings, huge ints, NaN)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return out if math.isfinite(out) else None


def read_progress(line: str, low: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """The step a line reports, by the grammar of the module doc.

    Args:
        line: one log line (bounded in length by the caller).
        low: ``line.lower()`` when the caller has it.

    Returns:
        ``launcher.logs.metrics.Metric`` fields (``source`` ``text`` or ``json``, ``step``,
        ``epoch``, ``step_in_epoch``, ``steps_per_epoch``, ``epochs``, ``total_steps``, ``loss`` or
        ``loss_text``/``event``, ``unit``), or None when the line is not a step line.
    """
    if low is None:
        low = line.lower()
    has_loss = "loss" in low
    if has_loss and "{" in line:
        fields = _read_object(line)
        if fields is not None:
            return fields
    # Cheap rejections first: nearly every line of a log is not progress.  Without a loss only a
    # counter with a total can make a step line.
    if not has_loss and ("/" not in line or _SLASH_COUNT_RE.search(line) is None):
        return None
    if "step" not in low and "it" not in low and "batch" not in low and "epoch" not in low and "/" not in line:
        return None
    loss = _find_loss(line) if has_loss else None
    c = _COUNTER_RE.search(line)
    if c is not None:
        total = int(c.group(3)) if c.group(3) else None
        if total is None and loss is None:
            return None
        return _counter_fields(line, int(c.group(2)), total, c.group(1), loss)
    if loss is None:
        return None
    e = _EPOCH_RE.search(line)
    if e is not None:
        p = _POSITION_RE.match(line, e.end())
        if p is not None:
            fields = _epoch_fields(e)
            fields.update(step=int(p.group(1)), steps_per_epoch=int(p.group(2)), step_in_epoch=True)
            if p.group(3):
                fields["unit"] = "samples"
            fields.update(loss)
            return fields
    b = _BAR_RE.search(line)
    if b is not None:
        done, of = (b.group(1), b.group(2)) if b.group(1) else (b.group(3), b.group(4))
        return _counter_fields(line, int(done), int(of), None, loss)
    return None


def _epoch_fields(e: "re.Match[str]") -> Dict[str, Any]:
    fields: Dict[str, Any] = {"source": "text", "epoch": int(e.group(1))}
    if e.group(2):
        fields["epochs"] = int(e.group(2))
    return fields


def _counter_fields(
    line: str, step: int, total: Optional[int], qualifier: Optional[str], loss: Optional[Dict[str, Any]]
) -> Dict[str, Any]:
    e = _EPOCH_RE.search(line)
    if e is not None and (qualifier or "").lower() != "global":
        fields = _epoch_fields(e)
        fields.update(step=step, step_in_epoch=True)
        if total is not None:
            fields["steps_per_epoch"] = total
    else:
        fields = {"source": "text", "step": step}
        if e is not None:
            fields.update(_epoch_fields(e))
        if total is not None:
            fields["total_steps"] = total
    if loss:
        fields.update(loss)
    return fields


def _loss_matches(line: str) -> Iterator[Tuple[bool, Dict[str, Any]]]:
    for m in _LOSS_RE.finditer(line):
        fields = loss_fields(m.group(1))
        if not fields:
            continue
        q = _QUALIFIER_RE.search(line, max(0, m.start() - 24), m.start())
        if q is None:
            main = True
        elif q.group(2) == " ":
            main = q.group(1).lower() in _MAIN_QUALIFIERS or not q.group(1).isalpha()  # "Step 3 Loss": no qualifier
        else:
            main = q.group(1).lower() in _MAIN_QUALIFIERS
        yield main, fields


def _find_loss(line: str) -> Optional[Dict[str, Any]]:
    """The line's main loss as fields (see the module doc), or None."""
    first: Optional[Dict[str, Any]] = None
    for main, fields in _loss_matches(line):
        if main:
            return fields
        if first is None:
            first = fields
    return first


def _read_object(line: str) -> Optional[Dict[str, Any]]:
    """A JSON object (or a Python dict's repr) in the line with a counter and a loss, as fields."""
    start, end = line.find("{"), line.rfind("}")
    if start < 0 or end <= start:
        return None
    text = line[start : end + 1]
    try:
        obj = json.loads(text)
    except (ValueError, RecursionError):
        if "'" not in text:
            return None
        try:
            obj = ast.literal_eval(text)
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            return None
    if not isinstance(obj, dict):
        return None
    step: Optional[int] = None
    loss: Optional[Dict[str, Any]] = None
    other_loss: Optional[Dict[str, Any]] = None
    fields: Dict[str, Any] = {"source": "json"}
    for key, value in obj.items():
        if not isinstance(key, str):
            continue
        norm = re.sub(r"[/ .\-]", "_", key.strip().lower())
        if step is None and norm in _JSON_COUNTER_KEYS:
            step = _count(value)
            continue
        m = _JSON_LOSS_KEY_RE.match(norm)
        if m is not None and not any(part in _EVAL_WORDS for part in norm.split("_")[:-1]):
            found = _json_loss(value)
            if found:
                main = m.group(1) is None or m.group(1) in _MAIN_QUALIFIERS
                if main and loss is None:
                    loss = found
                elif other_loss is None:
                    other_loss = found
            continue
        if norm in INT_KEYS and norm != "step":
            count = _count(value)
            if count is not None:
                fields[norm] = count
        elif norm in FLOAT_KEYS:
            value_f = finite(value)
            if value_f is not None and value_f >= 0:
                fields[norm] = value_f
    loss = loss or other_loss
    if step is None or loss is None:
        return None
    fields["step"] = step
    fields.update(loss)
    if "epoch" in fields and "steps_per_epoch" in fields:
        fields["step_in_epoch"] = True
    return fields


def _count(value: Any) -> Optional[int]:
    """A non-negative whole number (``10`` or ``10.0``), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, float) and math.isfinite(value) and value.is_integer() and value >= 0:
        return int(value)
    return None


def _json_loss(value: Any) -> Dict[str, Any]:
    if isinstance(value, float) and not math.isfinite(value):
        return loss_fields(repr(value))
    if finite(value) is not None:
        return {"loss": float(value)}
    if isinstance(value, str) and len(value) < 40:
        return loss_fields(value)
    return {}
