-- Tollgate global limits: the theoretical arrival time (TAT) that GCRA and the leaky bucket
-- share, prepended to both after lua/prelude.lua (crates/store/src/scripts.rs).
--
-- State: string KEYS[1] = TAT, the theoretical arrival time of the next request: "US" or
-- "US.NNN" (microseconds, then nanoseconds); a missing key is 0 (nothing owed). Each unit pushes
-- TAT one emission interval T further; tau = T * burst is how far it may run ahead of now.
--
-- ARGV[7] = T in ticks of ARGV[8] ns (1 or 1000), as the gateway computed it: the local
-- limiter's interval (period / count rounded up to a nanosecond), in nanoseconds whenever tau
-- fits a double (crates/limit script.rs). All arithmetic is in ticks relative to now, so it
-- stays exact: 750,000/s is 1,334 ns per unit here as locally, not 2 us.
-- Defines: T, tau, left(ahead), us(ticks), store(ahead), owed (ticks TAT is ahead of now)
-- and refund().

local T, tick = tonumber(ARGV[7]), tonumber(ARGV[8])
if bad(T) or (tick ~= 1 and tick ~= 1000) then
  return redis.error_reply('ERR tollgate limiter script: bad arguments')
end
local per_us = 1000 / tick -- ticks per microsecond
local tau = T * burst

-- Units still available when TAT is `ahead` ticks in the future.
local function left(ahead)
  return math.max(0, math.min(burst, math.floor((tau - ahead) / T)))
end
-- Ticks to whole microseconds, rounded up (a wait is never reported short).
local function us(ticks) return math.ceil(ticks / per_us) end

-- How far the stored TAT is ahead of now, in ticks (nil: no key, or not a TAT).
local function stored_ahead()
  local v = redis.call('GET', key)
  if not v then return nil end
  local whole, frac = string.match(v, '^(%d+)%.?(%d*)$')
  if not whole then return nil end
  local ahead = (tonumber(whole) - now) * per_us
  if frac ~= '' and tick == 1 then ahead = ahead + tonumber(frac) end
  return ahead
end

-- Stores TAT = now + ahead ticks, kept until it is back at now (+1 s).
local function store(ahead)
  local whole = now + math.floor(ahead / per_us)
  local ns = ahead % per_us
  local v = fmt(whole)
  if ns > 0 then v = v .. string.format('.%03d', ns) end
  redis.call('SET', key, v, 'PX', fmt(math.ceil(us(ahead) / 1000) + 1000))
end

local owed = math.max(0, stored_ahead() or 0)

-- Gives back `cost` units an acquire took (TAT moves back, never before now); never creates a
-- key.
local function refund()
  local ahead = owed - T * cost
  if ahead <= 0 then
    redis.call('DEL', key)
    return {1, burst, 0, 0, 0}
  end
  store(ahead)
  return {1, left(ahead), us(ahead), 0, 0}
end
