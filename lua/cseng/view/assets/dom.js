// cseng view: the DOM helpers every page of the viewer shares (loaded before app.js and
// history.js). Text goes in as text nodes; an href or src passes safeUrl first.
'use strict';

// A URL attribute as the browser will read it (ASCII tab and newline dropped anywhere, controls and
// spaces at the ends: `java<TAB>script:` is `javascript:`), so every control character and space
// goes first; then only http(s) or a path of the viewer's own passes (not //host or /\host).
function safeUrl(u) {
  const seen = String(u).replace(/[\u0000-\u0020\u007f]/g, '');
  const scheme = /^([a-zA-Z][a-zA-Z0-9+.-]*):/.exec(seen);
  if (scheme) return /^https?$/i.test(scheme[1]) ? seen : '#';
  return /^[\\/][\\/]/.test(seen) ? '#' : seen;
}

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'class') e.className = v;
    else if (k.startsWith('on')) e.addEventListener(k.slice(2), v);
    else if (k === 'href' || k === 'src') e.setAttribute(k, safeUrl(v));
    else e.setAttribute(k, v);
  }
  for (const k of kids.flat(Infinity)) if (k !== undefined && k !== null && k !== false) e.append(k instanceof Node ? k : String(k));
  return e;
}

// replaceChildren without the nulls of optional parts (it would insert the text "null")
function fill(node, ...kids) { node.replaceChildren(...kids.flat(Infinity).filter((k) => k !== null && k !== undefined && k !== false)); }

// An SVG element; an attribute that is undefined or null is left out.
function svgEl(tag, attrs, ...kids) {
  const e = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  for (const k of kids) e.append(k instanceof Node ? k : String(k));
  return e;
}
