"""A read replica: serves the learner's model, followed through the state topic, and learns nothing.

``novikoff serve --role replica`` (``[service] role = "replica"``) joins no consumer group and never
reads the events topic. A :class:`~consumers.state.follower.StateFollower` reads the compacted
state topic (``read_committed``, from the beginning) and each newer state record of the key
``state_key(group_id, topic)`` replaces the engine's model, tracker, counters and offsets
(:meth:`consumers.engine.Engine.load_payload`, then ``install``). The HTTP API is the learner's:
``/predict``, ``/model``, ``/stats``, ``/metrics`` and the dashboard report the learner's model
version.

In mixing mode (``[mixing] round_events > 0``) the model is the newest mixed model instead: the
replica runs a :class:`~consumers.mixing.runner.MixingRunner` that learns nothing and follows the
contributions topic (``read_committed``), mixing each complete round exactly as the learners do.

Readiness: ``/readyz`` answers 503 until the replica holds a model and has read the state topic
to its end, and again once it has not confirmed for ``[service] replica_max_model_age_seconds``
that its model is the newest (``novikoff_model_age_seconds``), or (mixing) while refused
contributions keep the mix from advancing. Predictions never stop: during a
broker outage the last model keeps serving.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from kafka import KafkaConsumer

from consumers.engine import Engine
from consumers.faults import ConsumerFault
from consumers.mixing.runner import MixingRunner
from consumers.reports import EngineSnapshot
from consumers.state.follower import FollowerConsumer, StateFollower
from consumers.state.topic import state_key
from learning.encoders import Encoder
from service.observability.metrics import Metrics
from service.settings import Settings

logger = logging.getLogger(__name__)


class Replica:
    """The replica's model and readiness: the HTTP API's engine and runner views at once.

    Parameters
    ----------
    settings
        The process settings (state topic, group, topic, age limit, connection).
    engine
        A fresh engine of the configured model; its state is replaced by each record followed.
    metrics
        Brought to each new model's statistics; ``novikoff_model_age_seconds`` is read from
        :attr:`model_age_seconds` at every scrape.
    consumer_factory
        Builds the follower's consumer (``KafkaConsumer`` unless a test passes a fake).
    mixing
        In mixing mode, the follow-only :class:`MixingRunner` that supplies the mixed models
        (``None``: follow the state topic).
    clock
        Monotonic clock shared with the follower (tests pass a fake).
    """

    def __init__(
        self,
        settings: Settings,
        engine: Engine,
        metrics: Metrics,
        *,
        consumer_factory: Callable[..., FollowerConsumer] = KafkaConsumer,
        mixing: MixingRunner | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        kafka = settings.kafka
        self._engine = engine
        self._clock = clock
        self._max_age = settings.service.replica_max_model_age_seconds
        self.follower: StateFollower | MixingRunner
        if mixing is not None:
            contributions = settings.mixing.contributions_topic_name(kafka.topic)
            self._source = f"contributions topic {contributions}"
            self.follower = mixing
        else:
            self._source = f"state topic {kafka.state_topic_name}"
            self.follower = StateFollower(
                kafka.state_topic_name,
                state_key(kafka.group_id, kafka.topic),
                self._accept,
                consumer_factory,
                kafka.client_config(),
                clock=clock,
            )
        metrics.watch_model_age(lambda: self.model_age_seconds)

    # -- the engine view ------------------------------------------------------------------------

    @property
    def snapshot(self) -> EngineSnapshot:
        """The followed model's snapshot (a fresh model before the first state record)."""
        return self._engine.snapshot

    @property
    def encoder(self) -> Encoder:
        """The model's encoder (fixed: replicas refuse the growing vocabulary encoding)."""
        return self._engine.encoder

    @property
    def restore_report(self) -> object:
        """A replica restores continuously from the state topic: readiness is :attr:`connected`."""
        return self.follower

    # -- the runner view ------------------------------------------------------------------------

    @property
    def model_age_seconds(self) -> float | None:
        """Seconds since the replica last knew its model was the newest committed state.

        ``None`` until it holds a model and has read the state topic to its end.
        """
        caught_up = self.follower.caught_up_at
        if not self.follower.holds_model or caught_up is None:
            return None
        return max(0.0, self._clock() - caught_up)

    @property
    def connected(self) -> bool:
        """Ready: a model is held and confirmed newest within the age limit, and (mixing) the
        mix is not blocked by refused contributions."""
        age = self.model_age_seconds
        return age is not None and age <= self._max_age and self._mix_blocked is None

    @property
    def _mix_blocked(self) -> str | None:
        follower = self.follower
        return follower.mix_blocked if isinstance(follower, MixingRunner) else None

    @property
    def not_ready_reason(self) -> str | None:
        """Why the replica is not ready (``None`` when it is)."""
        age = self.model_age_seconds
        problem = self.follower.problem
        suffix = f" ({problem})" if problem else ""
        if self._mix_blocked is not None and age is not None:
            return self._mix_blocked
        if not self.follower.holds_model:
            return f"no model from the {self._source} yet{suffix}"
        if age is None:
            return f"catching up with the {self._source}{suffix}"
        if age > self._max_age:
            return (
                f"the model is {age:.1f}s old, past service.replica_max_model_age_seconds = "
                f"{self._max_age:g}{suffix}"
            )
        return None

    @property
    def fault(self) -> ConsumerFault | None:
        """A replica has no events consumer, so no consumer fault."""
        return None

    # -- the follower's callback ----------------------------------------------------------------

    def _accept(self, payload: bytes) -> None:
        """Install a followed state (raises, leaving the model as it was, when it is unusable)."""
        state = self._engine.load_payload(payload)
        self._engine.install(state, f"model version {state.learner.version} from {self._source}")
