"""Provider API calls with typed errors: each SDK's exceptions mapped in one table, only the
transient ones retried.

A provider gives ``call_api`` a classifier built from its one table: ``by_type`` of an
``ErrorTable`` ((SDK exception types, typed error) pairs, first match wins), or its own function
where the SDK tells errors apart by an HTTP status rather than a type. A call's exception that
maps to ``Unavailable`` is retried: up to ``tries`` attempts within ``max_s`` seconds,
exponential backoff from 0.3 s (at most 8 s between tries; ``sleep`` injectable); then it is
raised as that ``Unavailable``. One that maps to another ``ProviderError`` subclass is raised at
once. One no entry maps (a ``TypeError`` in our own code, say) is re-raised as it is, at once:
never retried, never reported as the provider's fault.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from tenacity import retry, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_exponential

from benchctl.provisioners.base import ProviderError, Unavailable

T = TypeVar("T")
ErrorTable = Sequence[tuple[type[BaseException] | tuple[type[BaseException], ...], type[ProviderError]]]
Classify = Callable[[BaseException], type[ProviderError] | None]
"""The typed error an SDK exception maps to; None: not the provider's, re-raise as it is."""
Wording = Callable[[type[ProviderError], BaseException], str]
"""The message for a typed error: from its class and the SDK's exception."""


def by_type(table: ErrorTable) -> Classify:
    """The classifier of a table of exception types."""

    def classify(exc: BaseException) -> type[ProviderError] | None:
        return next((typed for types, typed in table if isinstance(exc, types)), None)

    return classify


def call_api(fn: Callable[[], T], classify: Classify, wording: Wording, *, tries: int = 5, max_s: float = 60.0,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, its exceptions mapped by ``classify``; ``Unavailable`` retried (bounded)."""

    def once() -> T:
        try:
            return fn()
        except ProviderError:
            raise
        except Exception as exc:
            typed = classify(exc)
            if typed is None:
                raise
            raise typed(wording(typed, exc)) from exc

    retrying = retry(retry=retry_if_exception_type(Unavailable), reraise=True, sleep=sleep,
                     stop=stop_after_attempt(tries) | stop_after_delay(max_s),
                     wait=wait_exponential(multiplier=0.3, max=8))
    return retrying(once)()

