-- Delete one subscription and its index entries, atomically (V7).
-- KEYS[1] record, KEYS[2] registry of index keys, KEYS[3 ..] the indexes of the record.
-- ARGV[1] the record the caller read (its index keys are KEYS[3 ..]), ARGV[2] its id.
-- Returns {1, ''} when removed, {0, ''} when there was no record, and {-1, <current>} when
-- the record changed since it was read (its indexes may differ): nothing is written then.
local current = redis.call('GET', KEYS[1])
if not current then
  return {0, ''}
end
if current ~= ARGV[1] then
  return {-1, current}
end
redis.call('DEL', KEYS[1])
for i = 3, #KEYS do
  redis.call('ZREM', KEYS[i], ARGV[2])
  if redis.call('EXISTS', KEYS[i]) == 0 then
    redis.call('SREM', KEYS[2], KEYS[i])
  end
end
return {1, ''}
