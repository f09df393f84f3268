-- Claim a start dedup key for an execution (W6).
-- KEYS[1] dedup key; ARGV[1] execution id, ARGV[2] ttl in ms.
-- Returns nil when claimed now, or the execution id that already holds the key.
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  return nil
end
return redis.call('GET', KEYS[1])
