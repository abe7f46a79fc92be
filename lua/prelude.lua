-- Tollgate limiter scripts: the part every script shares, prepended to each at build time
-- (crates/store/src/scripts.rs), so each EVALSHA still runs one self-contained script.
--
-- KEYS[1] the limiter key (the only key touched: safe on Redis Cluster).
-- ARGV    count, period_us (rate = count per period), burst (capacity, or units per window),
--         cost, mode ("acquire" | "refund": give back `cost` taken by an acquire another
--         limit denied; never creates a key), delay (leaky_bucket: queued requests that pass
--         without waiting; ignored by the others).
-- Time comes only from Redis TIME so every gateway shares one clock.
-- Defines for the script that follows: key, count, period, burst, cost, mode, delay, now (us)
-- and fmt (integers as strings for Redis).
if redis.replicate_commands then pcall(redis.replicate_commands) end

local key = KEYS[1]
local count, period = tonumber(ARGV[1]), tonumber(ARGV[2])
local burst, cost = tonumber(ARGV[3]), tonumber(ARGV[4])
local mode = ARGV[5]
local delay = tonumber(ARGV[6] or '0')
local function bad(x) return x == nil or x < 1 or x > 9007199254740991 or x ~= math.floor(x) end
if bad(count) or bad(period) or bad(burst) or bad(cost)
    or delay == nil or delay < 0 or delay > 9007199254740991 or delay ~= math.floor(delay)
    or (mode ~= 'acquire' and mode ~= 'refund') then
  return redis.error_reply('ERR tollgate limiter script: bad arguments')
end

local clock = redis.call('TIME')
local now = tonumber(clock[1]) * 1000000 + tonumber(clock[2])

-- Integers as strings: tostring() would print 16-digit numbers in %.14g and lose digits.
local function fmt(x) return string.format('%.0f', x) end

