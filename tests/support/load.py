"""A full-rate Kafka producer for the soak test (its HTTP load comes from ``wrk``)."""

from __future__ import annotations

import itertools
import threading
from collections import Counter
from dataclasses import dataclass, field

from kafka import KafkaProducer

from service.cli.synthetic import SyntheticStream

PRODUCER_CHUNK = 5_000
UNBOUNDED = 10**12


@dataclass
class FullRateProducer:
    """Publishes valid synthetic events as fast as the broker takes them, until stopped.

    Counts acknowledged records per partition (round-robin over ``partitions``).
    """

    bootstrap: str
    topic: str
    stream: SyntheticStream
    partitions: int
    acknowledged: Counter[int] = field(default_factory=Counter)
    error: BaseException | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> FullRateProducer:
        self._thread = threading.Thread(target=self._run, name="full-rate-producer", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> Counter[int]:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        if self.error is not None:
            raise self.error
        return self.acknowledged

    @property
    def total(self) -> int:
        return sum(self.acknowledged.values())

    def _run(self) -> None:
        producer = KafkaProducer(bootstrap_servers=self.bootstrap, acks="all", linger_ms=5)
        records = self.stream.records(UNBOUNDED, id_prefix="soak")
        try:
            index = 0
            while not self._stop.is_set():
                futures = []
                for _, value in itertools.islice(records, PRODUCER_CHUNK):
                    partition = index % self.partitions
                    futures.append(producer.send(self.topic, value=value, partition=partition))
                    index += 1
                producer.flush()
                for future in futures:
                    self.acknowledged[future.get().partition] += 1
        except BaseException as exc:
            self.error = exc
        finally:
            producer.close()
