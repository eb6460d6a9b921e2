--- A held request for the API fakes (messages.lua, responses.lua): no answer until the fake
--- closes (then a 503 to nobody, the client being gone); st.held counts them.
---   local hold = require('spec.fakes.llm.hold')(st)
---   ... return hold.wait()      -- in a handler
---   hold.closed = true          -- in close()
local task = require('cseng.task')

return function(st)
  local h = { closed = false }
  function h.wait()
    st.held = st.held + 1
    while not h.closed do task.sleep(0.02) end
    return 503, { ['Content-Type'] = 'application/json' }, '{"error":{"message":"the fake closed"}}'
  end
  return h
end
