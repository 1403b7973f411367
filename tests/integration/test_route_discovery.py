"""The SDK finds its cluster through the real control plane's route endpoint (a live server, token auth,
a topic approved through the workflow), then sends and receives through the broker it found there."""

from __future__ import annotations

import urllib.error
import urllib.request

import pytest

from broker_core.client import Consumer, Producer
from broker_core.client.discovery import resolve_route
from tests.broker.conftest import wait_for as wait_closely
from tests.broker.helpers import Received
from tests.integration.conftest import TOPIC

pytestmark = pytest.mark.django_db(transaction=True)


class RefuseRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):
        raise AssertionError(f"the SDK asked {req.full_url}, which answers a redirect ({code}) to {newurl}")


@pytest.fixture
def no_redirects():
    """The SDK must ask the endpoint's own URL: a redirect (Django's answer to a slash-less path) fails."""
    urllib.request.install_opener(urllib.request.build_opener(RefuseRedirects))
    yield
    urllib.request.install_opener(None)


def test_the_sdk_resolves_its_cluster_through_the_route_endpoint_and_uses_that_broker(governed, live_server, no_redirects):
    from tests.support.tokens import token_for

    cluster = governed.cluster
    broker = cluster.broker()
    token = token_for(governed.people.consumer)
    assert resolve_route(live_server.url, TOPIC, "dev", token=token) == cluster.zk
    with pytest.raises(urllib.error.HTTPError) as refused:
        resolve_route(live_server.url, TOPIC, "dev")  # the endpoint wants a token
    assert refused.value.code == 401

    routed = {"control_plane": live_server.url, "environment": "dev", "api_token": token}
    producer_kwargs = {k: v for k, v in governed.producer.items() if k != "zk"} | routed
    consumer_kwargs = {k: v for k, v in governed.consumer.items() if k != "zk"} | routed
    got = Received()
    with Consumer(TOPIC, "shipping", got.handler("c"), **consumer_kwargs) as consumer, \
            Producer(**producer_kwargs) as producer:
        sent = producer.send(TOPIC, b"routed", message_type="paid")
        wait_closely(lambda: got.ids("c") == [sent], 10, "the delivery")
        assert consumer.stats["brokers"] == [f"{broker.node_id}@{broker.address}"]
    assert broker.group_stats(TOPIC, "shipping")["acked"] == 1
