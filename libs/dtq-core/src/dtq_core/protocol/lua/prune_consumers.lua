#!lua flags=allow-oom
-- prune_consumers: delete consumers that hold nothing from a queue's consumer groups.
-- allow-oom: it only frees memory.
-- Every worker incarnation reads under a consumer name of its own (failure mode F7,
-- docs/failure-modes.md), so without this the groups keep one consumer per worker that ever
-- ran. Only consumers with no pending entry are deleted (XGROUP DELCONSUMER drops a
-- consumer's pending entries, which would strand them), and the check and the deletion are
-- one atomic call. A live worker whose
-- consumer is deleted loses nothing: its next read creates it again.
--
-- KEYS[1..10] priority streams p0..p9
-- ARGV[1] minimum idle ms   ARGV[2] only this consumer ("" for any)
-- Returns: the number of consumers deleted.
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local min_idle, only = tonumber(ARGV[1]), ARGV[2]
local deleted = 0
for pri = 0, #KEYS - 1 do
  local stream = stream_key(pri)
  local consumers = redis.pcall('XINFO', 'CONSUMERS', stream, 'workers')
  if type(consumers) == 'table' and not consumers.err then
    for _, c in ipairs(consumers) do
      local name, pending, idle
      for j = 1, #c, 2 do
        if c[j] == 'name' then name = c[j + 1]
        elseif c[j] == 'pending' then pending = c[j + 1]
        elseif c[j] == 'idle' then idle = c[j + 1] end
      end
      if pending == 0 and idle >= min_idle and (only == '' or name == only) then
        rcall('XGROUP', 'DELCONSUMER', stream, 'workers', name)
        deleted = deleted + 1
      end
    end
  end
end
return deleted
