-- The pool cycle against `runstate serve`: acquire one unit of a permit pool, then release it with
-- the grant's token. As in claim_cycle.lua, an acquire's answer queues its release; with c
-- connections at most c units are held, and the pool has more than that, so no acquire waits.
-- wrk -s bench/lua/pool_cycle.lua URL -- SPACE SCOPE_ID API_KEY PERMIT_ID
package.path = debug.getinfo(1, "S").source:match("@?(.*/)") .. "?.lua;" .. package.path
local report = require("report")

function setup(thread) report.setup(thread) end

function init(args)
  local space = args[1] or "default"
  local scope = args[2]
  local api_key = args[3] or "bench-key"
  base = "/v1/spaces/" .. space
  headers = {["Authorization"] = "Bearer " .. api_key, ["Content-Type"] = "application/json"}
  acquire = wrk.format("POST", base .. "/permits/" .. args[4] .. "/acquire", headers, string.format(
    '{"scopeId":"%s","units":1,"holder":"bench-worker-%d","holderSession":"bench-session-%d","leaseSeconds":30}',
    scope, thread_id, thread_id))
  releases = {}
  acquires, cycles, refused = 0, 0, 0
end

function request()
  local pending = table.remove(releases)
  if pending ~= nil then
    return wrk.format("POST", base .. "/grants/" .. pending[1] .. "/release", headers, '{"token":"' .. pending[2] .. '"}')
  end
  return acquire
end

function response(status, headers, body)
  if status ~= 200 then
    refused = refused + 1
    if os.getenv("BENCH_WRK_DEBUG") then io.stderr:write(status .. " " .. body .. "\n") end
    return
  end
  local token = body:match('"token":"([^"]*)"')
  if token ~= nil then
    acquires = acquires + 1
    table.insert(releases, {body:match('"grantId":"([^"]*)"'), token})
  else
    cycles = cycles + 1
  end
end

function done(summary, latency, requests)
  report.done(summary, latency, requests, {"acquires", "cycles", "refused"})
end
