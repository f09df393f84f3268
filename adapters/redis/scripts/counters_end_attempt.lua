-- Clear the open attempt of a dispatch that returned, only if it is still its own (W2).
-- KEYS[1] counters hash
-- ARGV[1] lease generation of the dispatch that ends
-- Returns 1 when cleared, 0 when another dispatch's attempt (or none) is open.
if redis.call('HGET', KEYS[1], 'attempt') == ARGV[1] then
  redis.call('HDEL', KEYS[1], 'attempt')
  return 1
end
return 0
