-- Tollgate limiter scripts: the part every script shares, prepended to each at build time
-- (crates/store/src/scripts.rs), so each EVALSHA still runs one self-contained script.
--
-- KEYS[1] the limiter key; KEYS[2] (leases only) its lease mark, in the same cluster slot.
-- ARGV    count, period_us (rate = count per period), burst (capacity, or units per window),
--         cost, mode ("acquire" | "refund": give back `cost` taken by an acquire another
--         limit denied; never creates a key | "lease": take up to `cost` units, as many as are
--         left, at least one | "hold": concurrency only, see lua/concurrency.lua), delay (leaky_bucket: queued requests that pass without waiting;
--         ignored by the others).
-- Time comes only from Redis TIME so every gateway shares one clock.
-- Defines for the script that follows: key, count, period, burst, cost, mode, delay, now (us),
-- fmt (integers as strings for Redis), lease_of and admitted (below).
if redis.replicate_commands then pcall(redis.replicate_commands) end

local key = KEYS[1]
local count, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local burst, cost = tonumber(ARGV[3]), tonumber(ARGV[4])
local mode = ARGV[5]
local delay = tonumber(ARGV[6] or '0')
local function bad(x) return x == nil or x < 1 or x > 9007199254740991 or x ~= math.floor(x) end
-- A cost of 0 checks without spending (a rate limit service's check-only call); a burst of 0
-- only counts (counting_window's `requests_per_unit: 0`).
local function bad0(x) return x == nil or x < 0 or x > 9007199254740991 or x ~= math.floor(x) end
if bad(count) or bad(period) or bad0(burst) or bad0(cost)
    or delay == nil or delay < 0 or delay > 9007199254740991 or delay ~= math.floor(delay)
    or (mode ~= 'acquire' and mode ~= 'refund' and mode ~= 'lease' and mode ~= 'hold') then
  return redis.error_reply('ERR tollgate limiter script: bad arguments')
end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- Integers as strings: tostring() would print 16-digit numbers in %.14g and lose digits.
local function fmt(x) return string.format('%.0f', x) end


-- Leases (mode "lease"): KEYS[2] holds until when (us) units leased to any gateway may still
-- come back unspent, and the last ARGV is a slice's ttl (us).
local lease_ttl = 0
if mode == 'lease' then
  lease_ttl = tonumber(ARGV[#ARGV])
  if KEYS[2] == nil or bad(lease_ttl) then
    return redis.error_reply('ERR tollgate limiter script: bad arguments')
  end
end

-- A lease takes what is left of its `cost`, at least one unit (which then decides as an acquire
-- of one would): call with the units available before taking.
local function lease_of(available)
  if mode == 'lease' then cost = math.max(1, math.min(cost, available)) end
end

-- The reply to an admitted acquire or lease. A lease also says how many units it took and in
-- how long they lapse (0: never; the window algorithms: at their window's end). A slice of more
-- than the asking request's unit may come back unspent until its ttl: that is recorded.
local function admitted(remaining, reset, lapse)
  if mode ~= 'lease' then return {1, remaining, reset, 0, 0} end
  if cost > 1 then
    redis.call('SET', KEYS[2], fmt(now + lease_ttl), 'PX', fmt(math.ceil(lease_ttl / 1000) + 1))
  end
  return {1, remaining, reset, 0, 0, cost, lapse}
end

-- The reply to a refusal: retry after `retry` us (at least 1), or sooner for a lease while
-- units leased elsewhere may still come back (then a gateway that caches the refusal asks
-- again when they may have; once none is out, it waits the whole `retry`).
local function refused(remaining, reset, retry)
  retry = math.max(1, retry)
  if mode == 'lease' then
    local out = tonumber(redis.call('GET', KEYS[2]) or '')
    if out ~= nil and out > now and out - now < retry then retry = out - now end
  end
  return {0, remaining, reset, retry, 0}
end
