#!lua flags=allow-oom
-- unregister_queue: remove a queue name from the queue registry (after drop_queue emptied it).
--
-- KEYS[1] queue registry set   ARGV[1] queue name
-- Returns: 1 when it was registered, else 0.
return rcall('SREM', KEYS[1], ARGV[1])
