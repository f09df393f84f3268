-- Trim a stream below the oldest entry a consumer group still needs (S5): nothing pending
-- and nothing a group has not read yet is ever removed.
-- KEYS[1..n] the streams (with their consumer groups; one hash tag: a queue partition's
--            priority streams), each trimmed on its own by the rule below
-- ARGV[1] minimum age in ms of a removed entry, by its id's time against the server's clock;
--         0: none. Readers without a group (the event bus's XREAD listeners) hold no place
--         in the stream: the age is their grace to read what every group has done with.
-- For each group the bound is its oldest pending entry or, with none pending, the first
-- entry after its last-delivered id (or no bound when it has read everything); the trim
-- bound is the lowest over every group and the age cutoff. XTRIM MINID is exact: it removes
-- the entries below the bound and nothing else. A stream without groups is trimmed by age
-- alone, and not at all without a minimum age.
-- Returns the number of entries removed from all of them.

-- Stream ids are "<ms>-<seq>" with 64-bit parts: compared as digit strings, never as Lua
-- numbers (doubles), so no id is misread.
local function before(a, b)
  local a_ms, a_seq = string.match(a, '^(%d+)-(%d+)$')
  local b_ms, b_seq = string.match(b, '^(%d+)-(%d+)$')
  if #a_ms ~= #b_ms then
    return #a_ms < #b_ms
  end
  if a_ms ~= b_ms then
    return a_ms < b_ms
  end
  if #a_seq ~= #b_seq then
    return #a_seq < #b_seq
  end
  return a_seq < b_seq
end

local min_age = tonumber(ARGV[1])

local function trim(stream)
  if redis.call('EXISTS', stream) == 0 then
    return 0
  end

  local bound = nil -- nil: nothing needs any entry
  local function lower(candidate)
    if bound == nil or before(candidate, bound) then
      bound = candidate
    end
  end

  local groups = redis.call('XINFO', 'GROUPS', stream)
  if #groups == 0 and min_age <= 0 then
    return 0
  end
  for _, group in ipairs(groups) do
    local fields = {}
    for i = 1, #group, 2 do
      fields[group[i]] = group[i + 1]
    end
    if tonumber(fields['pending']) > 0 then
      lower(redis.call('XPENDING', stream, fields['name'])[2])
    else
      local unread = redis.call('XRANGE', stream, '(' .. fields['last-delivered-id'], '+', 'COUNT', 1)
      if #unread > 0 then
        lower(unread[1][1])
      end
    end
  end
  if min_age > 0 then
    local now = redis.call('TIME')
    local cutoff_ms = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) - min_age
    if cutoff_ms < 0 then
      return 0
    end
    lower(string.format('%d-0', cutoff_ms))
  end
  if bound == nil then
    return redis.call('XTRIM', stream, 'MAXLEN', 0)
  end
  return redis.call('XTRIM', stream, 'MINID', bound)
end

local removed = 0
for _, stream in ipairs(KEYS) do
  removed = removed + trim(stream)
end
return removed
