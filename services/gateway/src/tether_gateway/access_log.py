"""The gateway's access log, sampled: every answer of 400 and above is logged, and one in N of
the others (TETHER_ACCESS_LOG_SAMPLE). A line per request cost the gateway about 5 % of its CPU in
`make bench`'s short runs (aiohttp formats it, then the JSON formatter redacts it); the request
counts by route and status stay exact in the Prometheus metrics (metrics.py)."""

from __future__ import annotations

import itertools

from aiohttp.abc import AbstractAccessLogger
from aiohttp.web_log import AccessLogger
from aiohttp.web_request import BaseRequest
from aiohttp.web_response import StreamResponse


def access_log_class(every: int) -> type[AbstractAccessLogger]:
    """aiohttp's AccessLogger, logging each answer of 400 and above and every `every`-th other
    one (the first included); 1 logs every request, 0 only those of 400 and above. aiohttp makes
    one logger per connection, so the count is the class's, shared by all of them."""
    if every < 0:
        raise ValueError(f"every must be 0 or more, not {every}")
    if every == 1:
        return AccessLogger

    class SampledAccessLogger(AccessLogger):
        _seen = itertools.count()

        def log(self, request: BaseRequest, response: StreamResponse, time: float) -> None:
            if response.status < 400 and (every == 0 or next(self._seen) % every):
                return
            super().log(request, response, time)

    return SampledAccessLogger
