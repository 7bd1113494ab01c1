-- The admit cycle against `runstate serve`: submit a task that needs one unit of a permit pool,
-- admit it (the delivery and its grant, in one decision), complete the delivery (which gives the
-- unit back). Answers come back in order on each connection, so counts are enough: a submit's
-- answer makes one admit due, an admit's answer queues its complete. The pool has more units than
-- there are connections, so no admit waits.
-- wrk -s bench/lua/admit_cycle.lua URL -- SPACE SCOPE_ID API_KEY MAILBOX_ID POOL_NAME RUN
-- (RUN names this run: its task keys are new ones, never those of an earlier run.)
package.path = debug.getinfo(1, "S").source:match("@?(.*/)") .. "?.lua;" .. package.path
local report = require("report")

function setup(thread) report.setup(thread) end

function init(args)
  local space = args[1] or "default"
  scope = args[2]
  local api_key = args[3] or "bench-key"
  mailbox = args[4]
  pool = args[5]
  run = args[6] or "r"
  base = "/v1/spaces/" .. space
  headers = {["Authorization"] = "Bearer " .. api_key, ["Content-Type"] = "application/json"}
  admit = wrk.format("POST", base .. "/tasks/admit", headers, string.format(
    '{"mailboxId":"%s","scopeId":"%s","holder":"bench-worker-%d","holderSession":"bench-session-%d","leaseSeconds":30}',
    mailbox, scope, thread_id, thread_id))
  due, sent = 0, 0
  completes = {}
  submits, admits, cycles, refused = 0, 0, 0, 0
end

function request()
  local pending = table.remove(completes)
  if pending ~= nil then
    return wrk.format("POST", base .. "/messages/" .. pending[1] .. "/complete", headers, '{"token":"' .. pending[2] .. '"}')
  end
  if due > 0 then
    due = due - 1
    return admit
  end
  sent = sent + 1
  return wrk.format("POST", base .. "/tasks", headers, string.format(
    '{"scopeId":"%s","mailboxId":"%s","taskKey":"%s-t%d-%d","requirements":{"pools":[{"name":"%s","units":1}]}}',
    scope, mailbox, run, thread_id, sent, pool))
end

function response(status, headers, body)
  if status == 204 then
    due = due + 1  -- nothing deliverable yet: admit again
    return
  end
  if status ~= 200 and status ~= 201 then
    refused = refused + 1
    if os.getenv("BENCH_WRK_DEBUG") then io.stderr:write(status .. " " .. body .. "\n") end
    return
  end
  if body:find('"grants"', 1, true) then
    admits = admits + 1
    table.insert(completes, {body:match('"messageId":"([^"]*)"'), body:match('"token":"([^"]*)"')})
  elseif body:find('"created":', 1, true) then
    submits = submits + 1
    due = due + 1
  else
    cycles = cycles + 1
  end
end

function done(summary, latency, requests)
  report.done(summary, latency, requests, {"submits", "admits", "cycles", "refused"})
end
