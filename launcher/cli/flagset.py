"""A set of flags that a command receives as one value: the decorator behind ``--ssh-*``,
``--metrics-*`` and ``--min-hosts`` / ``--rejoin-after`` (typer reads a command's flags from its
signature, so the decorator puts the set's parameters into the wrapper's signature)."""

from __future__ import annotations

import functools
import inspect
from typing import Any, Callable, Dict, Mapping, Optional, Sequence

__all__ = ["flag_set"]


def flag_set(
    params: Sequence[inspect.Parameter],
    receives: str,
    build: Callable[[Dict[str, Any], Mapping[str, Any]], Any],
    before: Optional[str] = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """A decorator adding ``params`` (keyword-only flags) to a command, which receives
    ``build(their values, the command's other arguments)`` as its argument ``receives`` instead.

    The flags go before the parameter named ``before``, else after the command's own options
    (before a keyword-only one such as ``opts``, if any).
    """
    names = [p.name for p in params]
    flags = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in params]

    def decorate(func: Callable[..., Any]) -> Callable[..., Any]:
        sig = inspect.signature(func)

        @functools.wraps(func)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            values = {name: kwargs.pop(name) for name in names}
            return func(*args, **{receives: build(values, kwargs)}, **kwargs)

        own = [p for p in sig.parameters.values() if p.name != receives]
        at = next(
            (i for i, p in enumerate(own) if p.name == before or p.kind == inspect.Parameter.KEYWORD_ONLY), len(own)
        )
        rest = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in own[at:]]
        wrapper.__signature__ = sig.replace(parameters=own[:at] + flags + rest)  # type: ignore[attr-defined]  # inspect.signature (typer) reads it
        return wrapper

    return decorate
