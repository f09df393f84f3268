-- Store one subscription and move its index entries, atomically (V7).
-- KEYS[1] record, KEYS[2] registry of index keys,
-- KEYS[3 .. 2+ARGV[5]] the indexes the new record belongs to,
-- KEYS[3+ARGV[5] ..] the indexes of the record the caller expects to replace.
-- ARGV[1] the record expected now ('' = none), ARGV[2] the new record, ARGV[3] its id,
-- ARGV[4] its score (created_at_ms), ARGV[5] how many new index keys follow KEYS[2].
-- The old index keys come from the record the caller read: if the record changed since,
-- they may be wrong, so nothing is written and the current record is returned for a retry.
-- Returns {1, ''} when written, {0, <current record>} when the caller must retry.
local current = redis.call('GET', KEYS[1]) or ''
if current ~= ARGV[1] and current ~= ARGV[2] then
  return {0, current}
end
local id = ARGV[3]
local first_old = 3 + tonumber(ARGV[5])
-- Old entries go first, so an index that is both old and new ends up holding the id.
for i = first_old, #KEYS do
  redis.call('ZREM', KEYS[i], id)
end
redis.call('SET', KEYS[1], ARGV[2])
for i = 3, first_old - 1 do
  redis.call('ZADD', KEYS[i], ARGV[4], id)
  redis.call('SADD', KEYS[2], KEYS[i])
end
-- An index left empty is gone in Redis; the registry forgets it with it.
for i = first_old, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    redis.call('SREM', KEYS[2], KEYS[i])
  end
end
return {1, ''}
