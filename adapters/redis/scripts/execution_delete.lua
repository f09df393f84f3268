-- Delete = revoke + tombstone (W13): remove one execution's state, node results, variables,
-- lease, counters, node heartbeat, operator flags, parked carriers and history and write its
-- tombstone, atomically. The generation counter stays.
-- KEYS[1] fencegen   KEYS[2] state   KEYS[3] nodes   KEYS[4] vars   KEYS[5] lease
-- KEYS[6] counters   KEYS[7] tombstone   KEYS[8] heartbeat   KEYS[9] control
-- KEYS[10] parked   KEYS[11] history   KEYS[12] history total
-- ARGV[1] fence of the deleting holder, or '' for an operator delete (no fence check; the
--         generation moves on so whoever holds the lease now can never write again)
-- ARGV[2] tombstone JSON   ARGV[3] tombstone ttl in ms
-- Returns {outcome, generation after, tombstone JSON or stored updated_at_ms}:
--   {'ok', generation, tombstone}: deleted; the tombstone is the first one ever written
--     (a second delete keeps it and only ever extends its TTL);
--   {'fenced', generation, updated_at}: ARGV[1] is not the current generation: nothing
--     changed; updated_at is the stored header field (or nil) so the caller can restore the
--     index entry its pipeline removed.
-- #include fence_next
local current = redis.call('GET', KEYS[1])
if ARGV[1] ~= '' and current ~= ARGV[1] then
  return {'fenced', current, redis.call('HGET', KEYS[2], 'updated_at_ms')}
end
if ARGV[1] == '' and current then
  current = next_fence(KEYS[1])
end
redis.call('DEL', KEYS[2], KEYS[3], KEYS[4], KEYS[5], KEYS[6], KEYS[8], KEYS[9], KEYS[10],
  KEYS[11], KEYS[12])
local stored = redis.call('GET', KEYS[7])
if stored then
  local ttl = tonumber(ARGV[3])
  local left = redis.call('PTTL', KEYS[7])
  if left >= 0 and left < ttl then
    redis.call('PEXPIRE', KEYS[7], ttl)
  end
  return {'ok', current, stored}
end
redis.call('SET', KEYS[7], ARGV[2], 'PX', ARGV[3])
return {'ok', current, ARGV[2]}
