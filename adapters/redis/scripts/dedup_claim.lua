-- Claim a start dedup key for an execution (W6).
-- KEYS[1] dedup key   KEYS[2] its "carrier enqueued" mark (same hash tag)
-- ARGV[1] execution id, ARGV[2] ttl in ms.
-- Returns nil when claimed now, else {holder execution id, remaining ttl in ms, mark 0|1}.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  redis.call('DEL', KEYS[2])
  return nil
end
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('EXISTS', KEYS[2])}
