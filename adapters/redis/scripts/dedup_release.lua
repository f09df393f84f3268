-- Release a start dedup claim only if it still names this execution (W6, W13).
-- KEYS[1] dedup key   KEYS[2] its "carrier enqueued" mark (same hash tag)
-- ARGV[1] execution id. Returns 1 when released, 0 otherwise.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[2])
  return redis.call('DEL', KEYS[1])
end
return 0
