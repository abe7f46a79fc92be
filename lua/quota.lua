-- Tollgate global quota: `burst` units per calendar period (day, ISO week from Monday, calendar
-- month or year) at a fixed UTC offset, the Redis twin of crates/limit Quota. The calendar is
-- computed here from Redis TIME (Howard Hinnant's days_from_civil / civil_from_days, as in
-- crates/limit/src/calendar.rs), so every gateway agrees on when a month ends.
--
-- State: hash KEYS[1] = {w = period index, n = units counted in it}. Extra arguments after the
-- prelude's: ARGV[7] the unit (d | w | m | y), ARGV[8] the offset in seconds east of UTC.
-- Returns {allowed, remaining, reset_us (to the period's end), retry_after_us (the same when
-- denied), 0}. The key expires a second after its period ends.
-- (lua/prelude.lua runs first: arguments checked, `now` from Redis TIME, fmt.)

local unit = ARGV[7]
local offset = tonumber(ARGV[8] or '0')
if (unit ~= 'd' and unit ~= 'w' and unit ~= 'm' and unit ~= 'y') or offset == nil then
  return redis.error_reply('ERR tollgate quota: bad calendar')
end

local function days_from_civil(y, m, d)
  if m <= 2 then y = y - 1 end
  local era = math.floor(y / 400)
  local yoe = y - era * 400
  local mp = (m > 2) and (m - 3) or (m + 9)
  local doy = math.floor((153 * mp + 2) / 5) + d - 1
  local doe = yoe * 365 + math.floor(yoe / 4) - math.floor(yoe / 100) + doy
  return era * 146097 + doe - 719468
end

local function civil_from_days(z)
  z = z + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local m = (mp < 10) and (mp + 3) or (mp - 9)
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  return y, m
end

local day_us = 86400 * 1000000
local off_us = offset * 1000000
local day = math.floor((now + off_us) / day_us)
local index, end_day
if unit == 'd' then
  index, end_day = day, day + 1
elseif unit == 'w' then
  index = math.floor((day + 3) / 7)
  end_day = index * 7 - 3 + 7
elseif unit == 'm' then
  local y, m = civil_from_days(day)
  index = y * 12 + m - 1
  if m == 12 then end_day = days_from_civil(y + 1, 1, 1) else end_day = days_from_civil(y, m + 1, 1) end
else
  local y = civil_from_days(day)
  index, end_day = y, days_from_civil(y + 1, 1, 1)
end
local period_end = end_day * day_us - off_us
local left = math.max(1, period_end - now)

local st = redis.call('HMGET', key, 'w', 'n')
local n = tonumber(st[2]) or 0
if tonumber(st[1]) ~= index then n = 0 end

if mode == 'lease' then
  return redis.error_reply('ERR tollgate limiter script: a quota counts each request: no lease')
end
if mode == 'refund' then
  if n == 0 then return {1, burst, 0, 0, 0} end
  n = math.max(0, n - cost)
  if n == 0 then
    redis.call('DEL', key)
  else
    redis.call('HSET', key, 'w', fmt(index), 'n', fmt(n))
    redis.call('PEXPIRE', key, fmt(math.ceil(left / 1000) + 1000))
  end
  return {1, burst - n, left, 0, 0}
end

if n + cost <= burst then
  n = n + cost
  redis.call('HSET', key, 'w', fmt(index), 'n', fmt(n))
  redis.call('PEXPIRE', key, fmt(math.ceil(left / 1000) + 1000))
  return {1, burst - n, left, 0, 0}
end
return {0, math.max(0, burst - n), left, left, 0}
