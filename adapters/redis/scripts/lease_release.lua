-- Delete a lease only if it still holds exactly our value ("holder|generation").
-- KEYS[1] lease   ARGV[1] expected value
-- Returns 1 when released, 0 when it was already gone or taken over.
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
