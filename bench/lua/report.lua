-- Shared by the bench's wrk scripts: print one JSON line that bench/wrk.py reads.
-- Each script keeps per-thread counters in globals and lists them in `counters`.
local report = {}

report.threads = {}

function report.setup(thread)
  thread:set("thread_id", #report.threads + 1)
  table.insert(report.threads, thread)
end

function report.done(summary, latency, requests, counters)
  local totals = {}
  for _, name in ipairs(counters) do
    totals[name] = 0
    for _, thread in ipairs(report.threads) do
      totals[name] = totals[name] + (tonumber(thread:get(name)) or 0)
    end
  end
  local parts = {
    string.format('"requests":%d', summary.requests),
    string.format('"duration_us":%d', summary.duration),
    string.format('"bytes":%d', summary.bytes),
    string.format('"errors_connect":%d', summary.errors.connect),
    string.format('"errors_read":%d', summary.errors.read),
    string.format('"errors_write":%d', summary.errors.write),
    string.format('"errors_status":%d', summary.errors.status),
    string.format('"errors_timeout":%d', summary.errors.timeout),
    string.format('"latency_mean_us":%.1f', latency.mean),
    string.format('"latency_max_us":%d', latency.max),
  }
  for _, p in ipairs({50, 90, 99, 99.9}) do
    table.insert(parts, string.format('"latency_p%s_us":%d', tostring(p), latency:percentile(p)))
  end
  for name, value in pairs(totals) do
    table.insert(parts, string.format('"%s":%d', name, value))
  end
  io.write("BENCH_JSON {" .. table.concat(parts, ",") .. "}\n")
end

return report
