-- Tollgate global limit: fixed window counter, the Redis twin of crates/limit FixedWindow.
-- One atomic EVALSHA per decision.
--
-- Windows are aligned on Redis time to multiples of window = ceil(burst * period / count) us
-- (the time the rate takes to accrue `burst`; equal to the period when burst == count), and
-- each admits `burst` units. Cheapest algorithm; it can admit up to twice `burst` across a
-- window edge (use sliding_window or sliding_log when that matters).
--
-- State: hash KEYS[1] { w = window index (floor(now / window)), n = units counted in w }. A
-- count from another window is 0, so the key expires at its window's end (+1 s slack).
--
-- Returns {allowed, remaining, reset_us (until the window ends, 0 if nothing is counted),
--          retry_after_us (>= 1 when denied: the window's end), delay_us (always 0)}.
-- (lua/prelude.lua runs first: arguments checked, `now` from Redis TIME, fmt.)

local window = math.max(1, math.ceil(burst * period / count))
local cur = math.floor(now / window)
local left = (cur + 1) * window - now -- time to the end of the current window, >= 1

local st = redis.call('HMGET', key, 'w', 'n')
local sw, n = tonumber(st[1]), tonumber(st[2])
local same = sw ~= nil and n ~= nil and sw == cur
if not same then n = 0 end

local function reset_of(k) if k > 0 then return left end return 0 end

if mode == 'refund' then
  if not same then return {1, burst, 0, 0, 0} end
  n = math.max(0, n - cost)
  if n == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'n', fmt(n))
    redis.call('PEXPIRE', key, fmt(math.ceil(left / 1000) + 1000))
  end
  return {1, math.max(0, burst - n), reset_of(n), 0, 0}
end

lease_of(burst - n)
if n + cost <= burst then
  n = n + cost
  redis.call('HSET', key, 'w', fmt(cur), 'n', fmt(n))
  redis.call('PEXPIRE', key, fmt(math.ceil(left / 1000) + 1000))
  -- Leased units count in this window only: they lapse at its end.
  return admitted(burst - n, left, left)
end

return refused(math.max(0, burst - n), reset_of(n), left)
