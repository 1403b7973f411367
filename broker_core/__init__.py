"""Switchyard's bundled broker: node process, storage, delivery, ZooKeeper membership and the SDK.

Nothing in this package imports Django; the control plane imports `broker_core.layout`
to write the ZooKeeper nodes the brokers read.
"""

__version__ = "0.4.0"
