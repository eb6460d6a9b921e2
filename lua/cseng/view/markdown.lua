--- The markdown the report templates and `cseng compare` write, as HTML for the viewer: headings,
--- paragraphs, block quotes, lists, pipe tables (with their alignment row), fenced code, and inline
--- code, bold, emphasis, links and images. An image whose target is `svg:N` is replaced by opts.svgs[N], the
--- chart's SVG inlined (the report helpers write charts as files; the viewer keeps them in the page).
--- Every other text is HTML-escaped, so a task id or an error message cannot inject markup; link
--- targets are checked as the browser reads them (safe_url), and no image comes from elsewhere.
local markdown = {}

local ESC = { ['&'] = '&amp;', ['<'] = '&lt;', ['>'] = '&gt;', ['"'] = '&quot;', ["'"] = '&#39;' }

--- HTML-escape a string.
---@param s any
---@return string
function markdown.escape(s)
  return (tostring(s):gsub('[&<>"\']', ESC))
end

-- A link or image target as the browser reads it (the WHATWG URL parser drops ASCII tab and
-- newline anywhere and C0 controls and spaces at the ends, so `java<TAB>script:` is
-- `javascript:`): every control character and space is removed first, then the scheme checked.
-- A link may be relative or http(s); an image only relative to the page (a chart is inlined as
-- svg:N; an image from another host would be a beacon), never //host or /\host.
local function safe_url(u, image)
  local seen = u:gsub('[%z\1-\32\127]', '')
  local scheme = seen:match('^(%a[%w+.-]*):')
  if scheme then
    scheme = scheme:lower()
    if not image and (scheme == 'http' or scheme == 'https') then return seen end
    return '#'
  end
  if seen:match('^[/\\][/\\]') or seen == '' then return '#' end
  return seen
end

-- inline markup of one line of (unescaped) markdown
local function inline(s, opts)
  local out, i = {}, 1
  local n = #s
  while i <= n do
    local c = s:sub(i, i)
    if c == '\\' and i < n and s:sub(i + 1, i + 1):match('[%p]') then
      out[#out + 1] = markdown.escape(s:sub(i + 1, i + 1)); i = i + 2
    elseif c == '`' then
      local j = s:find('`', i + 1, true)
      if j then out[#out + 1] = '<code>' .. markdown.escape(s:sub(i + 1, j - 1)) .. '</code>'; i = j + 1
      else out[#out + 1] = '`'; i = i + 1 end
    elseif c == '!' and s:sub(i + 1, i + 1) == '[' then
      local alt, src, stop = s:match('^!%[([^%]]*)%]%(([^)]*)%)()', i)
      if alt then
        local k = src:match('^svg:(%d+)$')
        if k and opts.svgs and opts.svgs[tonumber(k)] then
          out[#out + 1] = '<figure class="chart" role="img" aria-label="' .. markdown.escape(alt) .. '">' ..
            opts.svgs[tonumber(k)] .. '</figure>'
        else
          local url = safe_url(src, true)
          -- an image the page may not show is its alt text
          out[#out + 1] = url == '#' and markdown.escape(alt)
            or ('<img alt="' .. markdown.escape(alt) .. '" src="' .. markdown.escape(url) .. '">')
        end
        i = stop
      else out[#out + 1] = '!'; i = i + 1 end
    elseif c == '[' then
      local text, href, stop = s:match('^%[([^%]]*)%]%(([^)]*)%)()', i)
      if text then
        out[#out + 1] = '<a href="' .. markdown.escape(safe_url(href)) .. '">' .. inline(text, opts) .. '</a>'
        i = stop
      else out[#out + 1] = '['; i = i + 1 end
    elseif s:sub(i, i + 1) == '**' then
      local j = s:find('**', i + 2, true)
      if j then out[#out + 1] = '<strong>' .. inline(s:sub(i + 2, j - 1), opts) .. '</strong>'; i = j + 2
      else out[#out + 1] = '**'; i = i + 2 end
    elseif (c == '*' or c == '_') and s:sub(i + 1, i + 1):match('%S') and (i == 1 or s:sub(i - 1, i - 1):match('[%s%p]')) then
      local j = s:find(c, i + 1, true)
      if j and j > i + 1 and s:sub(j - 1, j - 1):match('%S') and (j == n or s:sub(j + 1, j + 1):match('[%s%p]')) then
        out[#out + 1] = '<em>' .. inline(s:sub(i + 1, j - 1), opts) .. '</em>'; i = j + 1
      else out[#out + 1] = markdown.escape(c); i = i + 1 end
    else
      local j = s:find('[\\`!%[%*_]', i + 1) or (n + 1)
      out[#out + 1] = markdown.escape(s:sub(i, j - 1)); i = j
    end
  end
  return table.concat(out)
end

--- One line of markdown's inline markup (code, bold, emphasis, links) as HTML, its text escaped.
---@param s string
---@return string
function markdown.inline(s)
  return inline(tostring(s), {})
end

local function cells(line)
  line = line:gsub('^%s*|', ''):gsub('|%s*$', '')
  local out, cur, i = {}, {}, 1
  while i <= #line do
    local c = line:sub(i, i)
    if c == '\\' and line:sub(i + 1, i + 1) == '|' then cur[#cur + 1] = '\\|'; i = i + 2
    elseif c == '|' then out[#out + 1] = table.concat(cur):match('^%s*(.-)%s*$'); cur = {}; i = i + 1
    else cur[#cur + 1] = c; i = i + 1 end
  end
  out[#out + 1] = table.concat(cur):match('^%s*(.-)%s*$')
  return out
end

--- Markdown to HTML.
---@param md string
---@param opts? {svgs?: string[], depth?: integer}
---@return string
function markdown.html(md, opts)
  opts = opts or {}
  local lines = {}
  for l in (md .. '\n'):gmatch('([^\n]*)\n') do lines[#lines + 1] = l end
  local out, i, para = {}, 1, {}
  local function flush()
    if #para > 0 then out[#out + 1] = '<p>' .. inline(table.concat(para, ' '), opts) .. '</p>'; para = {} end
  end
  while i <= #lines do
    local l = lines[i]
    local hashes, title = l:match('^(#+)%s+(.*)$')
    if l:match('^```') then
      flush()
      local code = {}
      i = i + 1
      while i <= #lines and not lines[i]:match('^```') do code[#code + 1] = lines[i]; i = i + 1 end
      out[#out + 1] = '<pre><code>' .. markdown.escape(table.concat(code, '\n')) .. '</code></pre>'
    elseif hashes and #hashes <= 6 then
      flush()
      out[#out + 1] = string.format('<h%d>%s</h%d>', #hashes + 1 > 6 and 6 or #hashes + 1, inline(title, opts),
        #hashes + 1 > 6 and 6 or #hashes + 1)
    elseif l:match('^%s*|') and lines[i + 1] and lines[i + 1]:match('^%s*|[%s:|%-]+$') then
      flush()
      local head, align = cells(l), {}
      for k, a in ipairs(cells(lines[i + 1])) do
        align[k] = a:match('^:.*:$') and 'center' or (a:match(':$') and 'right' or 'left')
      end
      local t = { '<div class="table-wrap"><table><thead><tr>' }
      for k, hd in ipairs(head) do t[#t + 1] = '<th class="' .. align[k] .. '">' .. inline(hd, opts) .. '</th>' end
      t[#t + 1] = '</tr></thead><tbody>'
      i = i + 2
      while i <= #lines and lines[i]:match('^%s*|') do
        t[#t + 1] = '<tr>'
        for k, cell in ipairs(cells(lines[i])) do
          t[#t + 1] = '<td class="' .. (align[k] or 'left') .. '">' .. inline(cell, opts) .. '</td>'
        end
        t[#t + 1] = '</tr>'
        i = i + 1
      end
      t[#t + 1] = '</tbody></table></div>'
      out[#out + 1] = table.concat(t)
      i = i - 1
    elseif l:match('^%s*>') and (opts.depth or 0) < 4 then
      -- a block quote: its lines without their `>`, rendered as markdown of their own (4 deep at
      -- most: a line of a thousand `>` is a paragraph, not a thousand calls)
      flush()
      local quoted = {}
      while i <= #lines and lines[i]:match('^%s*>') do
        quoted[#quoted + 1] = (lines[i]:gsub('^%s*> ?', ''))
        i = i + 1
      end
      out[#out + 1] = '<blockquote>' .. markdown.html(table.concat(quoted, '\n'),
        { svgs = opts.svgs, depth = (opts.depth or 0) + 1 }) .. '</blockquote>'
      i = i - 1
    elseif l:match('^%s*[-*]%s+') then
      flush()
      local items = {}
      while i <= #lines and lines[i]:match('^%s*[-*]%s+') do
        items[#items + 1] = '<li>' .. inline((lines[i]:gsub('^%s*[-*]%s+', '')), opts) .. '</li>'
        i = i + 1
      end
      out[#out + 1] = '<ul>' .. table.concat(items) .. '</ul>'
      i = i - 1
    elseif l:match('^%s*$') then
      flush()
    else
      para[#para + 1] = l
    end
    i = i + 1
  end
  flush()
  return table.concat(out, '\n')
end

return markdown
