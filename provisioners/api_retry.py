"""Provider API calls with typed errors: each SDK's exceptions mapped in one table, only the
transient ones retried.

A provider gives ``call_api`` an ``ErrorTable``: (SDK exception types, typed error) pairs, first
match wins. A call's exception that maps to ``Unavailable`` is retried: up to ``tries`` attempts
within ``max_s`` seconds, exponential backoff from 0.3 s (at most 8 s between tries); then it is
raised as that ``Unavailable``. One that maps to another ``ProviderError`` subclass is raised at
once. One no entry maps (a ``TypeError`` in our own code, say) is re-raised as it is, at once:
never retried, never reported as the provider's fault.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import TypeVar

from tenacity import retry, retry_if_exception_type, stop_after_attempt, stop_after_delay, wait_exponential

from provisioners.base import ProviderError, Unavailable

T = TypeVar("T")
ErrorTable = Sequence[tuple[type[BaseException] | tuple[type[BaseException], ...], type[ProviderError]]]
Wording = Callable[[type[ProviderError], BaseException], str]
"""The message for a typed error: from its class and the SDK's exception."""


def typed_error(exc: BaseException, table: ErrorTable, wording: Wording) -> ProviderError | None:
    """``exc`` as the typed error the table maps it to (its cause set); None when no entry does."""
    if isinstance(exc, ProviderError):
        return exc
    for types, typed in table:
        if isinstance(exc, types):
            error = typed(wording(typed, exc))
            error.__cause__ = exc
            return error
    return None


def call_api(fn: Callable[[], T], table: ErrorTable, wording: Wording, *, tries: int = 5, max_s: float = 60.0,
             sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, its exceptions mapped through ``table``; ``Unavailable`` retried (bounded)."""

    def once() -> T:
        try:
            return fn()
        except Exception as exc:
            error = typed_error(exc, table, wording)
            if error is None or error is exc:
                raise
            raise error from exc

    retrying = retry(retry=retry_if_exception_type(Unavailable), reraise=True, sleep=sleep,
                     stop=stop_after_attempt(tries) | stop_after_delay(max_s),
                     wait=wait_exponential(multiplier=0.3, max=8))
    return retrying(once)()


def with_retries(fn: Callable[[], T], retryable: Callable[[BaseException], bool], tries: int = 5,
                 max_s: float = 60.0, sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, retried (bounded as above) on errors ``retryable`` accepts; the last one re-raised.
    For providers not yet on ``call_api``."""
    from tenacity import retry_if_exception

    retrying = retry(retry=retry_if_exception(retryable), reraise=True, sleep=sleep,
                     stop=stop_after_attempt(tries) | stop_after_delay(max_s),
                     wait=wait_exponential(multiplier=0.3, max=8))
    return retrying(fn)()
