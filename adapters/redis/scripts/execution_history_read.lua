-- One page of an execution's history, read atomically with the counts it is numbered by.
-- KEYS[1] history (list, oldest first)   KEYS[2] history total (entries ever appended)
-- ARGV[1] after: the seq the page starts after (0: from the oldest kept)   ARGV[2] limit
-- Returns {total, kept, entries...}; entry i of the reply has seq total - kept + start + i,
-- start being the list position plaita.domain.history.history_window computes.
local total = tonumber(redis.call('GET', KEYS[2]) or '0')
local kept = redis.call('LLEN', KEYS[1])
local first_seq = total - kept + 1
local start_seq = math.max(first_seq, tonumber(ARGV[1]) + 1)
local start = start_seq - first_seq
local reply = {total, kept}
if start < kept then
  local entries = redis.call('LRANGE', KEYS[1], start, start + tonumber(ARGV[2]) - 1)
  for _, entry in ipairs(entries) do
    reply[#reply + 1] = entry
  end
end
return reply
