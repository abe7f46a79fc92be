-- Tollgate global limit: weighted sliding window, the Redis twin of crates/limit
-- SlidingWindow. One atomic EVALSHA per decision.
--
-- Windows are aligned on Redis time to multiples of window = ceil(burst * period / count) us
-- (equal to the period when burst == count). The count over the sliding window ending now is
-- estimated as n + p * (window - elapsed) / window: the current window's count plus the share
-- of the previous window's count that still overlaps, assuming its requests were spread evenly.
-- O(1) memory whatever the burst, no edge doubling as with fixed_window. All comparisons are
-- scaled by `window` so they stay in exact integers.
--
-- State: hash KEYS[1] { w = current window index, n = units in w, p = units in w - 1 }, rolled
-- forward on read. Nothing counts any more two windows after w, so that is the key's TTL.
--
-- Returns {allowed, remaining (floor of burst - estimate), reset_us (until the estimate is 0
--          if nothing else arrives), retry_after_us (>= 1 when denied: until this request
--          would fit if nothing else arrives), delay_us (always 0)}.
-- (lua/prelude.lua runs first: arguments checked, `now` from Redis TIME, fmt.)

local W = math.max(1, math.ceil(burst * period / count))
local cur = math.floor(now / W)

local st = redis.call('HMGET', key, 'w', 'n', 'p')
local sw, n, p = tonumber(st[1]), tonumber(st[2]) or 0, tonumber(st[3]) or 0
if sw == nil then
  if mode == 'refund' then return {1, burst, 0, 0, 0} end
  n, p = 0, 0
elseif sw >= cur then
  cur = sw -- same window (or the clock went backwards: keep the newer window as is)
elseif sw == cur - 1 then
  p, n = n, 0
else
  p, n = 0, 0
end

local elapsed = math.min(W, math.max(0, now - cur * W))
local to_next = W - elapsed
local weighted = p * (W - elapsed) -- previous window's share, scaled by W

-- Until the estimate is 0 with no more arrivals: both windows must pass while n counts.
local function reset_of()
  if n > 0 then return to_next + W elseif p > 0 then return to_next end
  return 0
end
local function remaining_of()
  return math.max(0, math.min(burst, math.floor((burst * W - weighted - n * W) / W)))
end
local function store()
  if n == 0 and p == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'w', fmt(cur), 'n', fmt(n), 'p', fmt(p))
    -- Counted from the stored window's start: equals reset_of() unless the clock went back.
    local live = (cur + 2) * W - now
    if n == 0 then live = (cur + 1) * W - now end
    redis.call('PEXPIRE', key, fmt(math.ceil(math.max(1, live) / 1000) + 1000))
  end
end

if mode == 'refund' then
  n = math.max(0, n - cost)
  store()
  return {1, remaining_of(), reset_of(), 0, 0}
end

lease_of(remaining_of())
if weighted + (n + cost) * W <= burst * W then
  n = n + cost
  store()
  -- Leased units count in this window: they lapse at its end.
  return admitted(remaining_of(), reset_of(), to_next)
end

local retry
if cost > burst then
  -- Never admissible: report the time until the estimate is 0 (as the local limiter does,
  -- at least the rest of this window).
  if n > 0 then retry = to_next + W else retry = to_next end
elseif n + cost <= burst then
  -- The previous window's weight must fall: p * (W - e) <= (burst - n - cost) * W.
  retry = (W - math.floor((burst - n - cost) * W / p)) - elapsed
else
  -- This window alone is too full: in the next one its count becomes the previous count.
  retry = to_next + (W - math.floor((burst - cost) * W / n))
end
return refused(remaining_of(), reset_of(), retry)
