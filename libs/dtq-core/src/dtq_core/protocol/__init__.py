"""The Redis protocol: the key map, the task-hash fields, the Lua transitions and their typed
wrappers, the records read back, submit preparation, task routing and event waits. Imports only
the vocabulary and ``dtq_core.infra`` (see docs/architecture.md, "Layers")."""
