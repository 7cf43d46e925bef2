#!lua flags=allow-oom
-- unregister_queue: remove a queue name from the queue registry (after drop_queue emptied it).
--
-- KEYS[1] queue registry set   ARGV[1] queue name
-- Returns: 1 when it was registered, else 0.
local registry_key = KEYS[1]
local queue_name = ARGV[1]
return rcall('SREM', registry_key, queue_name)
