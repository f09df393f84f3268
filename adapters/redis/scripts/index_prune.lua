-- Remove members whose record is gone from one index (V7, S1): one key, one hash slot.
-- KEYS[1] the index (sorted set); ARGV the ids the caller found without a record.
-- The records live in other hash slots, so the caller reads them itself, before this
-- script and again after it, and puts back an id whose record exists again
-- (index_pruning.py). At most 500 ids per call: the script blocks Redis while it runs.
-- Returns each id it removed followed by the score it had: {id1, score1, id2, score2, ...}.
if #ARGV > 500 then
  return redis.error_reply('index_prune takes at most 500 candidates per call, got ' .. #ARGV)
end
local removed = {}
for i = 1, #ARGV do
  local score = redis.call('ZSCORE', KEYS[1], ARGV[i])
  if score then
    redis.call('ZREM', KEYS[1], ARGV[i])
    removed[#removed + 1] = ARGV[i]
    removed[#removed + 1] = score
  end
end
return removed
