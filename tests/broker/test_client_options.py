"""The SDK's constructor arguments: what producers and consumers share (`ClientOptions`) and each one's own,
with their defaults. No broker: nothing connects before the first send or start."""

from __future__ import annotations

import os
import socket

import pytest

from broker_core.client import AsyncConsumer, AsyncProducer, Producer
from broker_core.client.options import ClientOptions

SHARED_DEFAULTS = {"zk": None, "control_plane": None, "environment": None, "brokers": None, "heartbeat_ms": 5000,
                   "connect_timeout": 5.0, "cache_dir": None, "api_token": None}
HOST_PID = f"{socket.gethostname()}-{os.getpid()}"


def shared(options: ClientOptions) -> dict:
    return {name: getattr(options, name) for name in SHARED_DEFAULTS}


def test_a_producer_takes_app_id_and_secret_first_and_the_defaults():
    producer = AsyncProducer("orders-svc", "s3cret", zk="zk1:2181/switchyard/prod-a")
    assert shared(producer.options) == {**SHARED_DEFAULTS, "zk": "zk1:2181/switchyard/prod-a"}
    assert (producer.send_timeout, producer.max_batch, producer.max_batch_bytes, producer.window) == (
        30.0, 512, 1024 * 1024, 16)
    assert producer.check_listener is None
    assert producer.options.conn_args() == {"app_id": "orders-svc", "secret": "s3cret",
                                            "client_id": f"producer-{HOST_PID}", "heartbeat_ms": 5000}
    assert producer.conn_args() == producer.options.conn_args()  # no check listener: no features
    assert producer.locator.zk == "zk1:2181/switchyard/prod-a" and producer.locator.start_timeout == 5.0


def test_a_consumer_takes_topic_group_handler_first_and_the_defaults(tmp_path):
    consumer = AsyncConsumer("orders", "billing", print, app_id="billing-svc", secret="s3cret",
                             control_plane="http://cp:8000", environment="prod", api_token="tok",
                             client_id="billing-1", heartbeat_ms=2000, connect_timeout=1.5, cache_dir=tmp_path)
    assert shared(consumer.options) == {**SHARED_DEFAULTS, "control_plane": "http://cp:8000", "environment": "prod",
                                        "api_token": "tok", "heartbeat_ms": 2000, "connect_timeout": 1.5,
                                        "cache_dir": tmp_path}
    assert (consumer.credit, consumer.ack_timeout_ms, consumer.resubscribe_delay, consumer.forget_after,
            consumer.drain_timeout) == (1000, 0, 2.0, 600.0, 30.0)
    assert consumer.options.conn_args() == {"app_id": "billing-svc", "secret": "s3cret", "client_id": "billing-1",
                                            "heartbeat_ms": 2000}
    assert (consumer.locator.control_plane, consumer.locator.api_token, consumer.locator.start_timeout) == (
        "http://cp:8000", "tok", 1.5)
    anonymous = AsyncConsumer("orders", "billing", print, app_id="a", secret="s", brokers=["127.0.0.1:1"])
    assert anonymous.options.client_id == f"consumer-{HOST_PID}"


def test_bad_arguments_are_refused_at_once():
    with pytest.raises(ValueError, match="give zk=, control_plane= with environment=, or brokers="):
        AsyncProducer("a", "s")
    with pytest.raises(ValueError, match="give zk="):
        AsyncConsumer("t", "g", print, app_id="a", secret="s", control_plane="http://cp:8000")  # no environment
    with pytest.raises(TypeError, match="window_size"):
        AsyncProducer("a", "s", brokers=["127.0.0.1:1"], window_size=3)
    with pytest.raises(TypeError, match="secret"):
        AsyncConsumer("t", "g", print, app_id="a", brokers=["127.0.0.1:1"])
    with pytest.raises(TypeError, match="send_timeout"):  # a producer's setting is not a consumer's
        AsyncConsumer("t", "g", print, app_id="a", secret="s", brokers=["127.0.0.1:1"], send_timeout=3)


def test_secrets_stay_out_of_the_options_repr():
    options = AsyncProducer("a", "the-secret", brokers=["127.0.0.1:1"], api_token="the-token").options
    assert "the-secret" not in repr(options) and "the-token" not in repr(options)


def test_the_blocking_producer_passes_everything_on():
    producer = Producer("a", "s", brokers=["127.0.0.1:1"], send_timeout=2.0, client_id="p-1", heartbeat_ms=1000)
    try:
        assert producer._timeout == 7.0
        assert producer._async.send_timeout == 2.0
        assert producer._async.options.conn_args() == {"app_id": "a", "secret": "s", "client_id": "p-1",
                                                       "heartbeat_ms": 1000}
    finally:
        producer.close()
