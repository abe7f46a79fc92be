-- wrk script for bench/global.py: GET /bench, or /bench/<WRK_KEYLEN random letters> (a key per
-- path), counting responses by status in every thread and printing them at the end with the
-- throughput and latency, one "NAME VALUE" per line.
local keylen = tonumber(os.getenv("WRK_KEYLEN") or "0")
local threads = {}
local next_id = 0

function setup(thread)
  next_id = next_id + 1
  thread:set("id", next_id)
  table.insert(threads, thread)
end

function init(args)
  counts = {}
  math.randomseed(os.time() * 1000 + id)
end

function request()
  if keylen == 0 then
    return wrk.format("GET", "/bench")
  end
  local t = {}
  for i = 1, keylen do t[i] = string.char(math.random(97, 122)) end
  return wrk.format("GET", "/bench/" .. table.concat(t))
end

function response(status, headers, body)
  counts[status] = (counts[status] or 0) + 1
end

function done(summary, latency, requests)
  local total = {}
  for _, t in ipairs(threads) do
    for status, n in pairs(t:get("counts")) do
      total[status] = (total[status] or 0) + n
    end
  end
  for status, n in pairs(total) do
    io.write(string.format("STATUS %d %d\n", status, n))
  end
  io.write(string.format("RPS %f\n", summary.requests / (summary.duration / 1e6)))
  io.write(string.format("P50 %f\n", latency:percentile(50)))
  io.write(string.format("P99 %f\n", latency:percentile(99)))
end
