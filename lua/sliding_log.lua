-- Tollgate global limit: exact sliding log, the Redis twin of crates/limit SlidingLog.
-- One atomic EVALSHA per decision.
--
-- Admits at most `burst` units in any interval of window = ceil(burst * period / count) us
-- (equal to the period when burst == count), exactly: the log keeps one entry per admitted unit
-- and an entry stamped s counts while now < s + window. Memory grows with burst (at most
-- `burst` entries per key); prefer sliding_window for large limits.
--
-- State: sorted set KEYS[1], score = admission time (us), one member per admitted unit. Stamps
-- never go backwards (a clock that did reuses the newest stamp). Members are
-- "<stamp>:<k>" where k numbers the units sharing that stamp 0, 1, 2, ... and is written with
-- a length letter (a = 1 digit, b = 2 digits, ...) so that member order is numeric order. The
-- units of one stamp are always exactly k = 0..m-1 (adds append k = m, refunds remove the
-- highest-ranked members, expiry removes whole stamps), so ZCOUNT of the stamp is the next
-- free k and members stay unique even for many calls in the same microsecond.
-- The key expires when its newest entry does (+1 s slack).
--
-- Returns {allowed, remaining, reset_us (until the newest entry expires), retry_after_us (>= 1
--          when denied: until enough of the oldest entries expire for this cost; for a cost
--          above burst, until the log is empty), delay_us (always 0)}.
-- (lua/prelude.lua runs first: arguments checked, `now` from Redis TIME, fmt.)

local W = math.max(1, math.ceil(burst * period / count))

-- Score of the newest entry (nil when the log is empty).
local function newest()
  local r = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if r[2] then return tonumber(r[2]) end
  return nil
end
-- Time until the newest entry expires, and keep the key's TTL on it.
local function settle(card)
  if card == 0 then return 0 end
  local reset = math.max(0, newest() + W - now)
  redis.call('PEXPIRE', key, fmt(math.ceil(reset / 1000) + 1000))
  return reset
end

if mode == 'lease' then
  return redis.error_reply('ERR tollgate limiter script: a sliding log records each request: no lease')
end
if mode == 'refund' then
  if redis.call('EXISTS', key) == 0 then return {1, burst, 0, 0, 0} end
  redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - W))
  redis.call('ZREMRANGEBYRANK', key, -cost, -1)
  local card = redis.call('ZCARD', key)
  local reset = settle(card)
  return {1, math.max(0, burst - card), reset, 0, 0}
end

-- Entries stamped at or before now - window no longer count.
redis.call('ZREMRANGEBYSCORE', key, '-inf', fmt(now - W))
local card = redis.call('ZCARD', key)

if card + cost <= burst then
  local stamp = now
  if card > 0 then stamp = math.max(now, newest()) end
  local s = fmt(stamp)
  local k = redis.call('ZCOUNT', key, s, s)
  local args = {}
  for i = 0, cost - 1 do
    local d = fmt(k + i)
    args[#args + 1] = s
    args[#args + 1] = s .. ':' .. string.char(96 + #d) .. d
    if #args >= 1000 or i == cost - 1 then
      redis.call('ZADD', key, unpack(args))
      args = {}
    end
  end
  local reset = stamp + W - now
  redis.call('PEXPIRE', key, fmt(math.ceil(reset / 1000) + 1000))
  return {1, burst - card - cost, reset, 0, 0}
end

local retry = 0
if cost > burst then
  if card > 0 then retry = newest() + W - now end
else
  -- The oldest (card + cost - burst) entries must leave: wait for the last of them.
  local i = card + cost - burst - 1
  local r = redis.call('ZRANGE', key, i, i, 'WITHSCORES')
  retry = tonumber(r[2]) + W - now
end
return {0, math.max(0, burst - card), settle(card), math.max(1, retry), 0}
