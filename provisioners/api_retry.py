"""Bounded retries around a provider API call: what can succeed on retry is retried, nothing else.

Every cloud provider's SDK call goes through ``with_retries``: up to ``tries`` attempts within
``max_s`` seconds, exponential backoff from 0.3 s (at most 8 s between tries), and only for
errors ``retryable`` accepts (429, 5xx, connection errors, timeouts, unreadable answers). The
last error is re-raised for the provider to turn into a clear ``ProviderError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from tenacity import retry, retry_if_exception, stop_after_attempt, stop_after_delay, wait_exponential

T = TypeVar("T")


def with_retries(fn: Callable[[], T], retryable: Callable[[BaseException], bool], tries: int = 5,
                 max_s: float = 60.0) -> T:
    @retry(retry=retry_if_exception(retryable), reraise=True, stop=stop_after_attempt(tries) | stop_after_delay(max_s),
           wait=wait_exponential(multiplier=0.3, max=8))
    def once() -> T:
        return fn()

    return once()
