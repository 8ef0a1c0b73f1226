"""Poison events: each becomes exactly one dead letter with the right reason and coordinates,
and the consumer goes on learning the valid stream around it.

Every kind in :func:`tests.support.poison.poison_catalogue` (not UTF-8, not JSON, not an object,
missing or unknown fields, labels outside the label map, wrong lengths and types, NaN and the
infinities, 1e999, empty features, a record near the broker's size limit, JSON nested 100,000
deep, duplicate keys, a misspelt field, ...) is mixed at a random place into a valid stream,
along with a valid event padded to ~1 MB (which must be learned, not refused).

Unknown extra fields are *refused* (``unknown_field``): a misspelt ``lable`` must never turn into
an event without a label or a different event (see "Event format" in the README).
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import Counter
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from consumers.decoding.events import REASON_CODES
from service.settings import load_settings
from service.topics import ensure_topics
from tests.support.faults import ConfiguredStream, FaultyService, offline_expectation, served_model
from tests.support.ledger import (
    DeadLetter,
    EventPlan,
    Ledger,
    Planned,
    publish,
    read_dead_letters,
    record_figures,
)
from tests.support.poison import NEAR_LIMIT_BYTES, POISON_DIM, poison_catalogue

pytestmark = pytest.mark.integration

VALID_EVENTS = 4_000
DRAIN_TIMEOUT_S = 120.0
README = Path(__file__).resolve().parents[2] / "README.md"


def padded(event: Planned) -> Planned:
    """The same valid event with whitespace after the object, to ~1 MB: still valid JSON."""
    assert event.value is not None
    return dataclasses.replace(event, value=event.value + b" " * NEAR_LIMIT_BYTES, kind="padded")


def invalid_metric(text: str) -> dict[str, float]:
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "novikoff_invalid_events_total":
                counts[sample.labels["reason"]] = sample.value
    return counts


def check_original_kept(letter: DeadLetter, planned: Planned) -> None:
    """The dead letter holds the original value byte for byte, or says it was cut and how."""
    if "novikoff.truncated" in letter.headers:
        assert planned.value is not None
        assert int(letter.headers["novikoff.truncated"]) == len(planned.value)
        digest = hashlib.sha256(planned.value).hexdigest().encode()
        assert letter.headers["novikoff.sha256"] == digest
        assert letter.value is not None and planned.value.startswith(letter.value)
    else:
        assert letter.value == planned.value, planned.kind


@pytest.mark.parametrize("partitions", [1, 3])
def test_every_poison_kind_is_dead_lettered_once_and_the_stream_goes_on(
    partitions: int, kafka_bootstrap: str, topic_name: str, tmp_path: Path, artifacts_dir: Path
) -> None:
    kinds = poison_catalogue()
    settings = load_settings(kafka={"bootstrap_servers": kafka_bootstrap})
    ensure_topics(settings.kafka, [topic_name], partitions=partitions)
    ensure_topics(settings.kafka, [f"{topic_name}.dlq"])
    stream = ConfiguredStream(dim=POISON_DIM, seed=17, margin=0.05, noise=0.05)
    plan = EventPlan(stream.synthetic(), partitions=partitions)
    planned = plan.mixed(VALID_EVENTS, kinds, seed=partitions)
    middle = next(i for i in range(len(planned) // 2, len(planned)) if planned[i].reason is None)
    planned[middle] = padded(planned[middle])
    ledger = Ledger(topic_name, publish(kafka_bootstrap, topic_name, planned))
    service = FaultyService(
        workdir=tmp_path,
        bootstrap=kafka_bootstrap,
        topic=topic_name,
        stream=stream,
        log_path=tmp_path / "serve.log",
        group_id=f"{topic_name}-group",
    )
    try:
        service.start()
        stats = service.wait_for(
            "drained",
            lambda s: (
                s["seen"] + sum(s["invalid"].values()) >= len(planned) and s["lag"] == 0 and s
            ),
            DRAIN_TIMEOUT_S,
        )
        assert service.alive
        letters = read_dead_letters(kafka_bootstrap, f"{topic_name}.dlq", len(kinds))
        report = ledger.check(stats, letters)
        assert report.missing == [], report.summary()
        assert report.problems == [], report.problems
        assert report.duplicate_dead_letters == 0, "no crash, so no repeated dead letter"
        assert report.learned + report.dead_lettered == report.produced

        by_source = {letter.source: letter for letter in letters}
        for record in ledger.poison:
            letter = by_source[(topic_name, record.planned.partition, record.offset)]
            check_original_kept(letter, record.planned)
            assert letter.message, record.planned.kind

        expected = Counter(kind.reason for kind in kinds)
        assert stats["invalid"] == dict(expected)
        assert invalid_metric(service.get("/metrics").text) == {
            reason: float(count) for reason, count in expected.items()
        }
        if partitions == 1:
            X, y = ledger.valid_arrays(0)
            assert served_model(service) == offline_expectation(stream, X, y)
        record_figures(
            artifacts_dir,
            "poison",
            partitions=partitions,
            kinds=[kind.name for kind in kinds],
            reasons=sorted(expected),
            produced=report.produced,
            learned=report.learned,
            dead_lettered=report.dead_lettered,
            missing=len(report.missing),
        )
    finally:
        service.stop()


def test_the_readme_documents_every_reason_code_and_the_unknown_field_decision() -> None:
    text = README.read_text(encoding="utf-8")
    missing = [code for code in REASON_CODES if f"`{code}`" not in text]
    assert not missing, f"README does not document reason codes {missing}"
    assert "unknown_field" in text
