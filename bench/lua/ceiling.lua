-- The HTTP ceiling: every request is a claim-sized JSON POST, answered by a claim-sized JSON body.
-- wrk -s bench/lua/ceiling.lua URL -- SPACE
package.path = debug.getinfo(1, "S").source:match("@?(.*/)") .. "?.lua;" .. package.path
local report = require("report")

function setup(thread) report.setup(thread) end

function init(args)
  local space = args[1] or "default"
  local body = string.format(
    '{"key":"t%d-k1","scopeId":"sc_0123456789abcdef","holder":"bench-worker",'
      .. '"holderSession":"bench-session-%d","leaseSeconds":30}', thread_id, thread_id)
  req = wrk.format("POST", "/v1/spaces/" .. space .. "/claims",
    {["Authorization"] = "Bearer bench-key", ["Content-Type"] = "application/json"}, body)
  ok = 0
end

function request() return req end

function response(status, headers, body)
  if status == 200 then ok = ok + 1 end
end

function done(summary, latency, requests) report.done(summary, latency, requests, {"ok"}) end
