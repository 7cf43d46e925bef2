"""What every dtq process runs on: settings, the Redis connection, logging, tracing, metrics and
the service start-up. Imports only ``dtq_core.errors``, ``dtq_core.messages`` and
``dtq_core.names`` from dtq (see docs/architecture.md, "Layers")."""
