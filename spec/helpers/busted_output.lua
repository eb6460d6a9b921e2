--- busted output handler: busted's own terminal output, then one plain line
--- "N passed, N failed[, N skipped]" that tools/check.sh and CI read.
return function(options)
  local busted = require('busted')
  local base = require('busted.outputHandlers.' .. (require('term').isatty(io.stdout) and 'utfTerminal' or 'plainTerminal'))(options)
  local counts = { success = 0, failure = 0, error = 0, pending = 0 }
  busted.subscribe({ 'test', 'end' }, function(_, _, status)
    counts[status] = (counts[status] or 0) + 1
    return nil, true
  end)
  busted.subscribe({ 'error' }, function(element)
    -- errors outside a test (in describe, setup, a file that fails to load) count as failures
    if element and element.descriptor ~= 'it' then counts.error = counts.error + 1 end
    return nil, true
  end)
  busted.subscribe({ 'exit' }, function()
    io.stdout:write('\n', string.format('%d passed, %d failed', counts.success, counts.failure + counts.error))
    if counts.pending > 0 then io.stdout:write(string.format(', %d skipped', counts.pending)) end
    io.stdout:write('\n')
    io.stdout:flush()
    return nil, true
  end)
  return base
end
