#!lua
-- register_queues: add queue names to the queue registry, never beyond its bound, so no
-- number of submits or worker starts can grow it (and the per-queue keys and metric series
-- it stands for) without limit.
--
-- KEYS[1] queue registry set
-- ARGV[1] most queues the registry may hold (0: no bound)   ARGV[2..] queue names
-- Returns: one flag per name: 1 registered (now or before), 0 refused (the registry is full).
local registry_key = KEYS[1]
local limit = tonumber(ARGV[1])
local FIRST_NAME = 2  -- ARGV[2..]: the queue names
local size = rcall('SCARD', registry_key)
local out = {}
-- Which names are registered already: one SMISMEMBER per 1,000 names, not a SISMEMBER each (a
-- worker re-registers all its queues every heartbeat). unpack() is bounded by Lua's C stack.
local known = {}
for i = FIRST_NAME, #ARGV, 1000 do
  local last = math.min(i + 999, #ARGV)
  local flags = rcall('SMISMEMBER', registry_key, unpack(ARGV, i, last))
  for j = 1, #flags do
    if flags[j] == 1 then known[ARGV[i + j - 1]] = true end
  end
end
for i = FIRST_NAME, #ARGV do
  if known[ARGV[i]] then
    out[#out + 1] = 1
  elseif limit == 0 or size < limit then
    rcall('SADD', registry_key, ARGV[i])
    known[ARGV[i]] = true
    size = size + 1
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
