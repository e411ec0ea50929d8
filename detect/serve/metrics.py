"""GET /metrics in Prometheus' text format (version 0.0.4): requests by route and status (499: the client left before
its answer), the requests taken and the bodies still arriving, the batch sizes, the time requests waited in the queue
and the time each batch took in the model. Written here, not by prometheus_client: six series do not need a
dependency."""

from __future__ import annotations

import bisect
import threading
from collections import Counter
from collections.abc import Sequence

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
SECONDS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class Histogram:
    """Cumulative buckets with upper bounds `bounds` (and +Inf), their sum and count."""

    def __init__(self, name: str, help_text: str, bounds: Sequence[float]) -> None:
        self.name, self.help_text, self.bounds = name, help_text, tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.sum += value

    def lines(self) -> list[str]:
        lines = [f"# HELP {self.name} {self.help_text}", f"# TYPE {self.name} histogram"]
        total = 0
        for bound, count in zip((*map(_number, self.bounds), "+Inf"), self.counts):
            total += count
            lines.append(f'{self.name}_bucket{{le="{bound}"}} {total}')
        return [*lines, f"{self.name}_sum {_number(self.sum)}", f"{self.name}_count {total}"]


class Metrics:
    """The service's counters; written from the event loop and the inference thread, read by GET /metrics."""

    def __init__(self, max_batch: int) -> None:
        self._lock = threading.Lock()
        self.requests: Counter[tuple[str, int]] = Counter()
        self.set_max_batch(max_batch)
        self.queue_wait = Histogram("detect_queue_wait_seconds", "Time a request waited for its batch.", SECONDS)
        self.inference = Histogram("detect_inference_seconds", "Time a batch took in the model and NMS.", SECONDS)
        self.pending = 0  # requests taken (their body in) and not yet answered
        self.reading = 0  # requests whose body is still arriving

    def set_max_batch(self, max_batch: int) -> None:
        """Batch-size buckets 1 to `max_batch` (a static export's batch replaces --max-batch once it is loaded)."""
        self.batch_size = Histogram("detect_batch_size", "Images per model call.", range(1, max_batch + 1))

    def record_request(self, route: str, status: int) -> None:
        with self._lock:
            self.requests[route, status] += 1

    def record_batch(self, size: int, seconds: float, waits: Sequence[float]) -> None:
        with self._lock:
            self.batch_size.observe(size)
            self.inference.observe(seconds)
            for wait in waits:
                self.queue_wait.observe(wait)

    def text(self) -> str:
        with self._lock:
            lines = ["# HELP detect_requests_total Requests answered, by route and HTTP status (499: the client left).",
                     "# TYPE detect_requests_total counter"]
            lines += [f'detect_requests_total{{route="{route}",status="{status}"}} {count}'
                      for (route, status), count in sorted(self.requests.items())]
            lines += ["# HELP detect_requests_pending Requests taken and not yet answered.",
                      "# TYPE detect_requests_pending gauge", f"detect_requests_pending {self.pending}",
                      "# HELP detect_requests_reading Requests whose body is still arriving.",
                      "# TYPE detect_requests_reading gauge", f"detect_requests_reading {self.reading}"]
            for histogram in (self.batch_size, self.queue_wait, self.inference):
                lines += histogram.lines()
        return "\n".join(lines) + "\n"


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(float(value))
