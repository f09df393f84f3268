-- Fenced incremental save (W4, S3): write one step's changes only under the current lease
-- generation, and never to a deleted execution (W13). The same script sets the lifetime of
-- every key of the execution (S5): a terminal checkpoint lets them expire within the
-- retention, one that makes the execution live again keeps them until it ends or is deleted.
-- KEYS[1] fencegen (never given a TTL, W4)   KEYS[2] state (hash: header field -> JSON)
-- KEYS[3] nodes (hash)   KEYS[4] vars (hash)   KEYS[5] tombstone   KEYS[6] counters
-- KEYS[7] heartbeat   KEYS[8] control (operator flags)   KEYS[9] parked (carriers)
-- KEYS[10] history (list, oldest first)   KEYS[11] history total (entries ever appended)
-- ARGV[1] fence the writer holds; '' for an acceptance (ADR 0022): a full save of a new
--         execution's first state, written only where it has no state (no fence: no lease
--         exists yet; a worker that holds one has written a state already)
-- ARGV[2] '1': full save (replace every part) | '0': delta on top of the stored state
-- ARGV[3] lifetime: 'keep' | 'expire' | 'persist' (plaita.domain.retention.lifetime_change)
-- ARGV[4] retention in ms (read for 'expire')
-- ARGV[5] header pairs   ARGV[6] node pairs   ARGV[7] removed nodes
-- ARGV[8] variable pairs   ARGV[9] removed variables
-- ARGV[10] history entries   ARGV[11] history cap (entries kept)
-- ARGV[12...] the header fields and values, node ids and results, removed node ids, variable
--             names and values, removed variable names, history entries, in that order.
-- Returns {outcome, current generation or nil}; outcome is
--   'ok'       written;
--   'fenced'   the generation is not ARGV[1]: nothing written;
--   'deleted'  a tombstone exists: nothing written;
--   'missing'  a delta met no stored state: nothing written, the caller saves in full;
--   'exists'   an acceptance met a stored state: nothing written.
local current = redis.call('GET', KEYS[1])
if ARGV[1] == '' then
  if redis.call('EXISTS', KEYS[2]) == 1 then
    return {'exists', current}
  end
elseif current ~= ARGV[1] then
  return {'fenced', current}
end
if redis.call('EXISTS', KEYS[5]) == 1 then
  return {'deleted', current}
end
if ARGV[2] == '1' then
  redis.call('DEL', KEYS[2], KEYS[3], KEYS[4])
elseif redis.call('EXISTS', KEYS[2]) == 0 then
  return {'missing', current}
end

local unpack = unpack or table.unpack
local position = 12
-- Run `command` on `key` over the next `count` items of `width` arguments each, in chunks so
-- a full save of a long run never unpacks more values than Lua's stack allows.
local function each(command, key, count, width)
  local last = position + count * width - 1
  local chunk = 256 * width
  local first = position
  while first <= last do
    local stop = math.min(first + chunk - 1, last)
    redis.call(command, key, unpack(ARGV, first, stop))
    first = stop + 1
  end
  position = last + 1
end

each('HSET', KEYS[2], tonumber(ARGV[5]), 2)
each('HSET', KEYS[3], tonumber(ARGV[6]), 2)
each('HDEL', KEYS[3], tonumber(ARGV[7]), 1)
each('HSET', KEYS[4], tonumber(ARGV[8]), 2)
each('HDEL', KEYS[4], tonumber(ARGV[9]), 1)
-- The history (not replaced by a full save): append, keep the newest ARGV[11], count.
local appended = tonumber(ARGV[10])
if appended > 0 then
  each('RPUSH', KEYS[10], appended, 1)
  redis.call('LTRIM', KEYS[10], -tonumber(ARGV[11]), -1)
  redis.call('INCRBY', KEYS[11], appended)
  if ARGV[3] == 'keep' then
    -- A history begun on a state that already expires (an operator's note on a finished
    -- execution) expires with it.
    local left = redis.call('PTTL', KEYS[2])
    if left > 0 then
      redis.call('PEXPIRE', KEYS[10], left)
      redis.call('PEXPIRE', KEYS[11], left)
    end
  end
end

if ARGV[3] == 'expire' then
  for _, key in ipairs({KEYS[2], KEYS[3], KEYS[4], KEYS[8], KEYS[9], KEYS[10], KEYS[11]}) do
    redis.call('PEXPIRE', key, ARGV[4])
  end
  -- LT: counters and heartbeat keep a shorter TTL of their own (a key without a TTL counts
  -- as never expiring, so it gets one).
  for _, key in ipairs({KEYS[6], KEYS[7]}) do
    redis.call('PEXPIRE', key, ARGV[4], 'LT')
  end
elseif ARGV[3] == 'persist' then
  -- Counters and heartbeat keep their own TTLs; the rest lives until the end or a delete.
  for _, key in ipairs({KEYS[2], KEYS[3], KEYS[4], KEYS[8], KEYS[9], KEYS[10], KEYS[11]}) do
    redis.call('PERSIST', key)
  end
end
return {'ok', current}
