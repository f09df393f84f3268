-- Fenced node heartbeat (W15): record the running node's progress only under the current
-- lease generation, and never for a deleted execution (W13).
-- KEYS[1] fencegen   KEYS[2] tombstone   KEYS[3] heartbeat
-- ARGV[1] fence the writer holds   ARGV[2] heartbeat JSON   ARGV[3] heartbeat ttl in ms
-- Returns {outcome, current generation or nil}; outcome is
--   'ok'       written;
--   'fenced'   the generation is not ARGV[1]: nothing written;
--   'deleted'  a tombstone exists: nothing written.
local current = redis.call('GET', KEYS[1])
if current ~= ARGV[1] then
  return {'fenced', current}
end
if redis.call('EXISTS', KEYS[2]) == 1 then
  return {'deleted', current}
end
redis.call('SET', KEYS[3], ARGV[2], 'PX', ARGV[3])
return {'ok', current}
