-- The claim cycle against `runstate serve`: acquire a key, then release it with the token the
-- acquire answered. wrk cannot tell a script which connection a response came on, so the script
-- keeps a pool of keys per thread: an acquire takes a free key, its answer queues the release
-- (key and token read from the claim view), and the release's answer frees the key again. With c
-- connections at most c keys are in use, and acquires and releases alternate one for one.
-- wrk -s bench/lua/claim_cycle.lua URL -- SPACE SCOPE_ID API_KEY
package.path = debug.getinfo(1, "S").source:match("@?(.*/)") .. "?.lua;" .. package.path
local report = require("report")

function setup(thread) report.setup(thread) end

function init(args)
  space = args[1] or "default"
  scope = args[2]
  api_key = args[3] or "bench-key"
  base = "/v1/spaces/" .. space .. "/claims"
  headers = {["Authorization"] = "Bearer " .. api_key, ["Content-Type"] = "application/json"}
  free = {}
  for i = 64, 1, -1 do table.insert(free, "t" .. thread_id .. "-k" .. i) end
  spare = 64
  releases = {}
  acquires, cycles, refused = 0, 0, 0
end

local function acquire_request()
  local key = table.remove(free)
  if key == nil then
    -- only after refused acquires lost track of keys: take a new one
    spare = spare + 1
    key = "t" .. thread_id .. "-k" .. spare
  end
  return wrk.format("POST", base, headers, string.format(
    '{"key":"%s","scopeId":"%s","holder":"bench-worker-%d","holderSession":"bench-session-%d","leaseSeconds":30}',
    key, scope, thread_id, thread_id))
end

function request()
  local pending = table.remove(releases)
  if pending ~= nil then
    return wrk.format("POST", base .. "/" .. pending[1] .. "/release", headers,
      '{"token":"' .. pending[2] .. '"}')
  end
  return acquire_request()
end

function response(status, headers, body)
  if status ~= 200 then
    refused = refused + 1
    if os.getenv("BENCH_WRK_DEBUG") then io.stderr:write(status .. " " .. body .. "\n") end
    return
  end
  local key = body:match('"key":"([^"]*)"')
  local token = body:match('"token":"([^"]*)"')
  if token ~= nil then
    acquires = acquires + 1
    table.insert(releases, {key, token})
  else
    cycles = cycles + 1
    table.insert(free, key)
  end
end

function done(summary, latency, requests)
  report.done(summary, latency, requests, {"acquires", "cycles", "refused"})
end
