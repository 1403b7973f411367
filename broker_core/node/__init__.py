"""A broker node: `broker` wires storage, delivery, the cluster, tracing and the HTTP side together, `server`
serves one client connection, `options` holds the settings. `python -m broker_core` runs `broker.run`."""
