-- Remove dead members from one index: ids whose record is gone or expired (V7).
-- KEYS[1] the index (sorted set), KEYS[2] the registry of index keys (set),
-- KEYS[3 ..] the record key of each candidate; ARGV[i] the id whose record is KEYS[i + 2].
-- A candidate whose record exists again (re-added since it was read) stays. At most 500
-- candidates per call: the script blocks Redis while it runs. An index that is gone
-- (emptied, or expired with its TTL) leaves the registry, so the janitor stops visiting it.
-- Returns how many members were removed.
if #KEYS - 2 > 500 then
  return redis.error_reply('index_prune takes at most 500 candidates per call, got ' .. (#KEYS - 2))
end
local removed = 0
for i = 3, #KEYS do
  if redis.call('EXISTS', KEYS[i]) == 0 then
    removed = removed + redis.call('ZREM', KEYS[1], ARGV[i - 2])
  end
end
if redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('SREM', KEYS[2], KEYS[1])
end
return removed
