"""Topic creation for the demo, ``novikoff produce --partitions`` and tests."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping

from kafka import KafkaAdminClient
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from consumers.mixing.contribution import CONTRIBUTION_TOPIC_CONFIGS
from consumers.state.topic import STATE_TOPIC_CONFIGS
from service.settings import KafkaSettings, Settings

logger = logging.getLogger(__name__)

BROKER_DEFAULT_REPLICATION = -1
"""CreateTopics' "use the broker's ``default.replication.factor``" (KIP-464)."""


def ensure_topics(
    kafka: KafkaSettings,
    names: Iterable[str],
    partitions: int = 1,
    configs: Mapping[str, str] | None = None,
) -> list[str]:
    """Create the topics in ``names`` that do not exist yet; return the ones created.

    Parameters
    ----------
    kafka
        Connection settings (bootstrap servers, security).
    names
        Topic names.
    partitions
        Partition count of each topic created.
    configs
        Topic configuration of each topic created (e.g. ``cleanup.policy``).

    Each topic gets ``kafka.replication_factor`` replicas, or the broker's
    ``default.replication.factor`` when that setting is unset.
    """
    replication = (
        kafka.replication_factor
        if kafka.replication_factor is not None
        else BROKER_DEFAULT_REPLICATION
    )
    admin = KafkaAdminClient(**kafka.client_config())
    try:
        existing = set(admin.list_topics())
        wanted = [name for name in dict.fromkeys(names) if name not in existing]
        created = []
        for name in wanted:
            try:
                admin.create_topics(
                    [NewTopic(name, partitions, replication, topic_configs=dict(configs or {}))]
                )
            except TopicAlreadyExistsError:
                continue
            created.append(name)
            logger.info("created topic %s with %d partition(s)", name, partitions)
        return created
    finally:
        admin.close()


def ensure_state_topic(kafka: KafkaSettings) -> list[str]:
    """Create the compacted state topic (``kafka.state_topic_name``) if it does not exist yet.

    One partition: the topic holds one record per (group, model), compacted to the newest.
    """
    return ensure_topics(kafka, [kafka.state_topic_name], configs=STATE_TOPIC_CONFIGS)


def ensure_contributions_topic(settings: Settings) -> list[str]:
    """Create the mixing contributions topic if it does not exist yet.

    One partition (one total order of contributions), kept for ever: a (re)started learner
    rebuilds the mixed models by reading it from the start.
    """
    name = settings.mixing.contributions_topic_name(settings.kafka.topic)
    return ensure_topics(settings.kafka, [name], configs=CONTRIBUTION_TOPIC_CONFIGS)
