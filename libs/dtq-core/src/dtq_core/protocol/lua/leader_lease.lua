#!lua flags=allow-oom
-- leader_lease: acquire, renew or release the scheduler leader lease (one global key).
-- Renewal is compare-and-PEXPIRE, which Redis allows even under maxmemory (SET is refused).
--
-- KEYS[1] leader key
-- ARGV[1] mode: "acquire" | "renew" | "release"   ARGV[2] token "<epoch>:<replica>"
-- ARGV[3] ttl ms
-- Returns: 1 when the caller holds (or released) the lease, 0 otherwise.
local leader_key = KEYS[1]
local mode, token, ttl_ms = ARGV[1], ARGV[2], ARGV[3]
if mode == 'acquire' then
  if rcall('SET', leader_key, token, 'NX', 'PX', ttl_ms) then return 1 end
  return 0
end
if rcall('GET', leader_key) ~= token then return 0 end
if mode == 'renew' then
  rcall('PEXPIRE', leader_key, ttl_ms)
else
  rcall('DEL', leader_key)
end
return 1
