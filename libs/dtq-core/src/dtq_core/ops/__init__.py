"""Operator features on top of the SDK: the admin API, browsing, schedules, the audit stream,
recovery and the ``dtq`` command line (see docs/architecture.md, "Layers")."""
