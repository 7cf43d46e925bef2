#!lua flags=allow-oom
-- drop_queue: delete an empty queue's keys (streams with their consumer group, delayed set,
-- dead-letter stream, events, per-minute history) in one step, or nothing when it holds any
-- task: waiting, running, delayed or dead. Finished task records are left to their retention TTL, and the
-- small metadata hash stays: it keeps the highest leader epoch the queue has seen, so a
-- deposed leader stays fenced off if the queue is created again.
--
-- KEYS[1..10] priority streams p0..p9   KEYS[11] delayed   KEYS[12] dlq   KEYS[13] events
-- Returns: {"dropped"} or {"busy", waiting (0 or 1 per stream: at least that many), running,
--   delayed, dead}.
local function stream_key(pri) return KEYS[pri + 1] end  -- KEYS[1..10]: p0..p9
local delayed_key, dlq_key = KEYS[11], KEYS[12]  -- KEYS[13] events: only deleted
-- An entry is waiting when it lies after the group's last-delivered id (exact, where the
-- group's lag can be unknown after trims); running when it is pending.
local function undelivered(stream)
  local groups = redis.pcall('XINFO', 'GROUPS', stream)
  if type(groups) ~= 'table' or groups.err then return rcall('XLEN', stream), 0 end
  for _, g in ipairs(groups) do
    local f = {}
    for i = 1, #g, 2 do f[g[i]] = g[i + 1] end
    if f['name'] == 'workers' then
      local after = rcall('XRANGE', stream, '(' .. f['last-delivered-id'], '+', 'COUNT', 1)
      return #after, tonumber(f['pending'])
    end
  end
  return rcall('XLEN', stream), 0
end
local depth, running = 0, 0
for pri = 0, 9 do
  local stream = stream_key(pri)
  if rcall('EXISTS', stream) == 1 then
    local w, r = undelivered(stream)
    depth, running = depth + w, running + r
  end
end
local delayed = rcall('ZCARD', delayed_key)
-- Tasks waiting in groups count as waiting (lua/_lib.lua, "Groups"); the tasks prefix is the
-- delayed key's, dtq:{q}:delayed -> dtq:{q}:.
local base = string.sub(delayed_key, 1, -8)
depth = depth + tonumber(rcall('GET', base .. 'gq:wait') or '0')
local dead = rcall('XLEN', dlq_key)
if depth + running + delayed + dead > 0 then
  return {'busy', depth, running, delayed, dead}
end
rcall('DEL', unpack(KEYS))  -- every key it was passed
-- and the groups' settings (no group holds a task now), and its per-minute history: a queue
-- made again under the same name starts with none.
rcall('DEL', base .. 'gq:all', base .. 'gq:wait', base .. 'gq:set', base .. 'gq:due')
hist_drop(base, now_parts())
return {'dropped'}
