-- Tollgate global limit: envoyproxy/ratelimit's counting, the Redis twin of crates/limit
-- CountingWindow. One atomic EVALSHA per decision.
--
-- Windows are the rate's whole period (us), aligned on Redis time from the Unix epoch (the
-- service's `(now / divider) * divider`). Every hit counts, refused ones too (the service's
-- INCRBY); a hit is over the limit when the count after it passes `burst` (which may be 0:
-- every counted hit is over). A check of 0 units counts nothing and passes at exactly the limit.
--
-- State: hash KEYS[1] { w = window index, n = units counted in w }; it expires at its
-- window's end (+1 s slack).
--
-- Returns {allowed, remaining, reset_us (until the window ends), retry_after_us (the window's
--          end when over), delay_us (always 0)}.
-- (lua/prelude.lua runs first: arguments checked, `now` from Redis TIME, fmt.)

local window = math.max(1, period)
local cur = math.floor(now / window)
local left = (cur + 1) * window - now -- time to the end of the current window, >= 1

local st = redis.call('HMGET', key, 'w', 'n')
local sw, n = tonumber(st[1]), tonumber(st[2])
if sw == nil or n == nil or sw ~= cur then n = 0 end

if mode == 'refund' then
  if n == 0 then return {1, burst, 0, 0, 0} end
  n = math.max(0, n - cost)
else
  n = n + cost
end
if n > 0 then
  redis.call('HSET', key, 'w', fmt(cur), 'n', fmt(n))
  redis.call('PEXPIRE', key, fmt(math.ceil(left / 1000) + 1000))
elseif sw ~= nil then
  redis.call('DEL', key)
end
if n <= burst then return {1, burst - n, left, 0, 0} end
return {0, 0, left, left, 0}
