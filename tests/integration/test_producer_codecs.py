"""Records from librdkafka (confluent-kafka) in every codec Kafka defines are learned, exactly.

A librdkafka producer writes one known stream into a one-partition topic, a block of events per
``compression.type`` (none, gzip, snappy, lz4, zstd), each record with a key and headers. The real
``novikoff serve`` consumes it; its model must equal the offline learner's on the same events in
the same order, and every offset of every codec's block must be applied.

Controls: the same check fails against the expectation of a stream missing one record; and each
block is shown to be compressed with its codec on the wire, since kafka-python refuses to read it
once that codec's library is reported missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import kafka.codec
import pytest
from confluent_kafka import KafkaException, Producer
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import UnsupportedCodecError

from service.cli.offline import decode_values, decoder_for
from service.cli.synthetic import SyntheticStream
from service.model import build_learner
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.running_service import RunningService, Stream

pytestmark = pytest.mark.integration

CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
EVENTS_PER_CODEC = 400
STREAM = Stream(dim=4, seed=11, margin=0.05, noise=0.05, malformed=0.0)
FLUSH_TIMEOUT_S = 30.0
POLL_TIMEOUT_MS = 10_000
LINGER_MS = 20
"""Long enough for librdkafka to put many records in a batch, so compression pays off and the
batch is written compressed rather than as is."""
CODEC_CHECKERS = {
    "gzip": "has_gzip",
    "snappy": "has_snappy",
    "lz4": "has_lz4",
    "zstd": "has_zstd",
}
"""The ``kafka.codec`` function kafka-python asks before decoding a batch of each codec."""


@dataclass(frozen=True)
class Block:
    """The records one codec's producer wrote: their offsets, keys, headers and values."""

    codec: str
    offsets: tuple[int, ...]
    keys: tuple[bytes, ...]
    headers: tuple[tuple[tuple[str, bytes], ...], ...]
    values: tuple[bytes, ...]


def stream_values(count: int) -> list[bytes]:
    synthetic = SyntheticStream(
        dim=STREAM.dim, seed=STREAM.seed, margin=STREAM.margin, noise=STREAM.noise
    )
    return [value for _, value in synthetic.records(count)]


def produce_block(bootstrap: str, topic: str, codec: str, values: list[bytes]) -> Block:
    """Produce ``values`` with librdkafka in ``codec``; the offsets come from delivery reports."""
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "compression.type": codec,
            "linger.ms": LINGER_MS,
            "acks": "all",
            "enable.idempotence": True,
        }
    )
    keys = tuple(f"{codec}-key-{index}".encode() for index in range(len(values)))
    headers = tuple(
        (("codec", codec.encode()), ("sequence", str(index).encode()))
        for index in range(len(values))
    )
    delivered: dict[int, int] = {}
    failures: list[str] = []
    for index, value in enumerate(values):

        def report(error: Any, message: Any, index: int = index) -> None:
            if error is not None:
                failures.append(str(error))
            else:
                delivered[index] = message.offset()

        producer.produce(
            topic,
            value=value,
            key=keys[index],
            headers=list(headers[index]),
            partition=0,
            on_delivery=report,
        )
        producer.poll(0)
    remaining = producer.flush(FLUSH_TIMEOUT_S)
    assert remaining == 0 and not failures, (remaining, failures)
    offsets = [delivered[index] for index in range(len(values))]
    assert offsets == sorted(offsets)
    return Block(codec, tuple(offsets), keys, headers, tuple(values))


def offline_model(values: list[bytes]) -> dict[str, Any]:
    """The offline learner's weights and counters after ``values`` in order."""
    settings = load_settings(model={"dim": STREAM.dim})
    learner = build_learner(settings.model)
    decoded = decode_values(values, decoder_for(learner))
    assert not decoded.invalid
    learner.learn_batch(decoded.X, decoded.y)
    snapshot = learner.snapshot()
    return {
        "last": snapshot.weights.tolist(),
        "averaged": snapshot.averaged_weights.tolist(),
        "mistakes": learner.n_updates,
    }


def served_model(service: RunningService) -> dict[str, Any]:
    model = service.get("/model").json()
    stats = service.stats()
    return {
        "last": model["weights"]["last"],
        "averaged": model["weights"]["averaged"],
        "mistakes": stats["mistakes"],
    }


def read_block(bootstrap: str, topic: str, block: Block) -> list[Any]:
    """The block's records as kafka-python reads them, from its first offset."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        partition = TopicPartition(topic, 0)
        consumer.assign([partition])
        consumer.seek(partition, block.offsets[0])
        records: list[Any] = []
        while len(records) < len(block.offsets):
            polled = consumer.poll(timeout_ms=POLL_TIMEOUT_MS, max_records=len(block.offsets))
            assert polled, f"nothing polled for {block.codec}"
            records.extend(polled.get(partition, []))
        return records[: len(block.offsets)]
    finally:
        consumer.close()


@pytest.fixture
def blocks(kafka_bootstrap: str, topic_name: str) -> Iterator[list[Block]]:
    kafka = load_settings(kafka={"bootstrap_servers": kafka_bootstrap}).kafka
    ensure_topics(kafka, [topic_name, f"{topic_name}.dlq"], partitions=1)
    values = stream_values(EVENTS_PER_CODEC * len(CODECS))
    written = []
    for number, codec in enumerate(CODECS):
        chunk = values[number * EVENTS_PER_CODEC : (number + 1) * EVENTS_PER_CODEC]
        try:
            written.append(produce_block(kafka_bootstrap, topic_name, codec, chunk))
        except KafkaException as exc:  # pragma: no cover - a broker refusing a codec fails here
            raise AssertionError(f"librdkafka could not produce {codec}: {exc}") from exc
    yield written


def test_every_codec_from_librdkafka_is_learned_exactly(
    blocks: list[Block], kafka_bootstrap: str, topic_name: str, tmp_path: Path
) -> None:
    values = [value for block in blocks for value in block.values]
    total = len(values)
    assert total == EVENTS_PER_CODEC * len(CODECS)
    with RunningService(
        tmp_path, kafka_bootstrap, topic_name, STREAM, tmp_path / "serve.log"
    ) as service:
        stats = service.wait_drained(total)
        assert stats["seen"] == total, stats
        assert sum(stats["invalid"].values()) == 0, stats["invalid"]
        (partition,) = stats["partitions"]
        applied = [tuple(span) for span in partition["applied"]]
        for block in blocks:
            first, last = block.offsets[0], block.offsets[-1]
            assert any(start <= first and last < end for start, end in applied), (
                block.codec,
                applied,
            )
        served = served_model(service)
    assert served == offline_model(values)
    # Control: the comparison sees a single missing record.
    assert served != offline_model(values[:-1])
    assert served != offline_model(
        values[: EVENTS_PER_CODEC * 2] + values[EVENTS_PER_CODEC * 2 + 1 :]
    )


@pytest.mark.parametrize("codec", CODECS)
def test_each_block_is_compressed_with_its_codec_keys_and_headers_intact(
    blocks: list[Block],
    kafka_bootstrap: str,
    topic_name: str,
    codec: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    block = next(b for b in blocks if b.codec == codec)
    records = read_block(kafka_bootstrap, topic_name, block)
    assert [r.offset for r in records] == list(block.offsets)
    assert [r.key for r in records] == list(block.keys)
    assert [tuple(r.headers) for r in records] == list(block.headers)
    assert [r.value for r in records] == list(block.values)
    # The batches really carry the codec: without its library kafka-python cannot read them,
    # while an uncompressed block reads fine without any codec library.
    if codec == "none":
        for checker in CODEC_CHECKERS.values():
            monkeypatch.setattr(kafka.codec, checker, lambda: False)
        reread = read_block(kafka_bootstrap, topic_name, block)
        assert [r.value for r in reread] == list(block.values)
        return
    monkeypatch.setattr(kafka.codec, CODEC_CHECKERS[codec], lambda: False)
    with pytest.raises(UnsupportedCodecError, match=codec):
        read_block(kafka_bootstrap, topic_name, block)
