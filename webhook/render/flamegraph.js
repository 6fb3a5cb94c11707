// sidecar-debug flame graph: the one renderer's page script (webhook/render/page.py inlines it
// and allows it by its hash in the page's Content-Security-Policy).
//
// Reads <script id="profile" type="application/json">: {title, names, frames (name indices of
// all stacks, root first, one after the other), depths (each stack's length), counts, before
// (differential: the base profile's counts), unit, facts, notes, warnings, named, unnamed
// (indices of unnamed frame names), name (download stem)}.
// Every string in it comes from the profiled app or its metadata: it reaches the page through
// textContent and SVG text nodes only, never as markup, never as an attribute.
//
// Flame (root at the bottom, flamegraph.pl's) or icicle (root at the top) view; siblings sorted
// by name (flamegraph.pl's order) or by weight; click zooms into a frame, Esc or "Reset"
// returns; the search box (a regular expression, or plain text when it is not one) highlights
// matching frames and says which share of the samples they hold; a tooltip gives samples, % of
// all and % of the parent; downloads (folded, speedscope, pprof) are made in the page.
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var ROW = 17; // px per frame row
  var CHAR = 7.2; // px per character at 12px monospace
  var MIN_WIDTH = 0.5; // px: narrower frames (and what is above them) are not drawn
  var MAX_ROWS = 3000; // deeper frames are not drawn (a hostile stack can be 500k deep)
  var TIP_CHARS = 1000; // characters of a name in the tooltip (search uses the whole name)
  var $ = function (id) { return document.getElementById(id); };

  var data = JSON.parse($("profile").textContent);
  var names = data.names;
  var differential = !!data.differential;
  var unit = data.unit || "samples";
  var scale = data.scale || 1; // differential: A's counts times this compare with B's
  var unnamed = new Set(data.unnamed || []);
  var svg = $("flame");
  var graph = $("graph");
  var tip = $("tip");
  var details = $("details");
  var searchBox = $("search");
  var frameOf = new WeakMap(); // drawn rect -> tree node

  // --- the call tree --------------------------------------------------------------------------
  // A profile of 50k stacks has a million nodes: plain fields, children in an array (most
  // frames call a few functions) that becomes a Map when it grows.
  var FEW = 12;
  function Node(name, parent) {
    this.n = name; // index into names; -1 for the root
    this.v = 0; // samples in this frame and above (B's in a differential graph)
    this.b = 0; // the same in A (differential; real counts: scaled by `scale` to compare)
    this.p = parent;
    this.d = parent ? parent.d + 1 : 0;
    this.kids = null; // [Node] (few) or Map name index -> Node
    this.byName = null; // children sorted, made when first drawn
    this.byWeight = null;
  }
  function child(node, name) {
    var kids = node.kids, found;
    if (kids === null) {
      found = new Node(name, node);
      node.kids = [found];
      return found;
    }
    if (Array.isArray(kids)) {
      for (var i = 0; i < kids.length; i++) {
        if (kids[i].n === name) {
          return kids[i];
        }
      }
      found = new Node(name, node);
      kids.push(found);
      if (kids.length > FEW) {
        node.kids = new Map(kids.map(function (kid) { return [kid.n, kid]; }));
      }
      return found;
    }
    found = kids.get(name);
    if (!found) {
      found = new Node(name, node);
      kids.set(name, found);
    }
    return found;
  }
  function kidsOf(node) {
    return node.kids === null ? NONE : Array.isArray(node.kids) ? node.kids :
      Array.from(node.kids.values());
  }
  var NONE = [];
  var stacks = []; // per stack, its name indices
  (function split() {
    for (var i = 0, at = 0; i < data.depths.length; at += data.depths[i], i++) {
      stacks.push(data.frames.slice(at, at + data.depths[i]));
    }
  })();
  var root = new Node(-1, null);
  (function build() {
    var counts = data.counts, before = data.before || [];
    for (var i = 0; i < stacks.length; i++) {
      var v = counts[i], b = before[i] || 0, node = root, stack = stacks[i];
      node.v += v;
      node.b += b;
      for (var j = 0; j < stack.length; j++) {
        node = child(node, stack[j]);
        node.v += v;
        node.b += b;
      }
    }
  })();

  var shown = []; // name index -> the name as displayed
  function nameOf(node) {
    return node.n < 0 ? "all" : names[node.n];
  }
  // Control, bidirectional and zero-width characters are shown as \uXXXX: a name cannot hide
  // itself or reorder its neighbours' text.
  function visible(node) {
    if (node.n < 0) {
      return "all";
    }
    var text = shown[node.n];
    if (text === undefined) {
      text = names[node.n].replace(
        /[\u0000-\u001f\u007f-\u009f\u00ad\u061c\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff]/g,
        function (c) { return "\\u" + ("000" + c.charCodeAt(0).toString(16)).slice(-4); });
      shown[node.n] = text;
    }
    return text;
  }

  var order = "name";
  function byName(a, b) {
    var x = names[a.n], y = names[b.n];
    return x < y ? -1 : x > y ? 1 : 0;
  }
  function byWeight(a, b) {
    return b.v - a.v || byName(a, b);
  }
  function children(node) {
    if (node.kids === null) {
      return NONE;
    }
    if (order === "weight") {
      return node.byWeight || (node.byWeight = kidsOf(node).slice().sort(byWeight));
    }
    return node.byName || (node.byName = kidsOf(node).slice().sort(byName));
  }

  // --- colours --------------------------------------------------------------------------------
  function hash(text) {
    var h = 0;
    for (var i = 0; i < text.length && i < 64; i++) {
      h = (h * 31 + text.charCodeAt(i)) | 0;
    }
    return Math.abs(h);
  }
  function color(node) {
    if (differential) {
      var scaled = node.b * scale, delta = node.v - scaled;
      if (Math.abs(delta) < 1e-9 * Math.max(root.v, 1) || (unit === "samples" &&
          Math.abs(delta) < 1)) {
        return "rgb(225,225,225)";
      }
      var strength = Math.min(1, Math.abs(delta) / Math.max(scaled, node.v, 1e-300));
      var c = Math.round(225 - 165 * strength);
      return delta > 0 ? "rgb(255," + c + "," + c + ")" : "rgb(" + c + "," + c + ",255)";
    }
    if (node.n < 0) {
      return "rgb(240,200,160)";
    }
    if (unnamed.has(node.n)) {
      return "rgb(200,200,200)";
    }
    var name = names[node.n], h = hash(name);
    if (/_\[k\]$/.test(name)) {
      return "hsl(" + (180 + h % 30) + ",55%,65%)";
    }
    return "hsl(" + (h % 55) + ",80%," + (55 + h % 15) + "%)";
  }

  // --- text -------------------------------------------------------------------------------------
  function percent(value, of) {
    return (100 * value / (of || 1)).toFixed(2) + " %";
  }
  // Amounts as a person reads them (webhook/render/model.py amount() writes the same): samples
  // as they are, time in the largest unit it holds one of (4.31 s), bytes in KiB/MiB/GiB.
  var TIME = [["s", 1], ["ms", 1e-3], ["\u00b5s", 1e-6], ["ns", 1e-9]];
  var SECONDS = {"s": 1, "ms": 1e-3, "\u00b5s": 1e-6, "ns": 1e-9};
  var BYTES = [["GiB", 1073741824], ["MiB", 1048576], ["KiB", 1024]];
  function figure(value) {
    return Math.abs(value) >= 100 ? value.toFixed(0) : String(Number(value.toPrecision(3)));
  }
  function count(value) {
    return Number.isInteger(value) ? String(value) : String(Number(value.toFixed(3)));
  }
  function amount(value) {
    var i;
    if (SECONDS[unit] !== undefined) {
      var seconds = value * SECONDS[unit];
      for (i = 0; i < TIME.length; i++) {
        if (Math.abs(seconds) >= TIME[i][1] || i === TIME.length - 1) {
          return figure(seconds / TIME[i][1]) + " " + TIME[i][0];
        }
      }
    }
    if (unit === "bytes") {
      for (i = 0; i < BYTES.length; i++) {
        if (Math.abs(value) >= BYTES[i][1]) {
          return figure(value / BYTES[i][1]) + " " + BYTES[i][0];
        }
      }
      return figure(value) + " bytes";
    }
    return count(value) + " " + unit;
  }
  function approx(value) { // a scaled count: a tenth of a sample is precise enough
    return amount(unit === "samples" ? Math.round(value * 10) / 10 : value);
  }
  function signed(value, text) {
    return (value >= 0 ? "+" : "-") + text;
  }
  function clip(text, limit) {
    return text.length <= limit ? text : text.slice(0, limit) + "... (" + text.length +
      " characters)";
  }
  function describe(node, limit) {
    var name = clip(visible(node), limit) || "(empty frame name)";
    var parent = node.p || node;
    if (differential) {
      var scaled = node.b * scale, delta = node.v - scaled;
      return name + "\nA " + amount(node.b) + (scale === 1 ? "" : " (" + approx(scaled) +
        " scaled)") + ", B " + amount(node.v) + " (" + signed(delta, approx(Math.abs(delta))) +
        (scale === 1 ? "" : " against scaled A") + "), " + percent(node.v, root.v) +
        " of all B";
    }
    return name + "\n" + amount(node.v) + ", " + percent(node.v, root.v) + " of all, " +
      percent(node.v, parent.v) + " of the parent";
  }

  // --- search ---------------------------------------------------------------------------------
  var pattern = null;
  var matchCache = [];
  function matches(node) {
    if (pattern === null || node.n < 0) {
      return false;
    }
    var hit = matchCache[node.n];
    if (hit === undefined) {
      hit = matchCache[node.n] = pattern.test(names[node.n]);
    }
    return hit;
  }
  function matchedSamples() {
    var sum = 0, todo = [root];
    while (todo.length) {
      var node = todo.pop();
      if (matches(node)) {
        sum += node.v; // not its callees again
      } else if (node.kids !== null) {
        var kids = kidsOf(node);
        for (var i = 0; i < kids.length; i++) {
          todo.push(kids[i]);
        }
      }
    }
    return sum;
  }
  function search() {
    var text = searchBox.value.trim();
    pattern = null;
    matchCache = [];
    if (text) {
      try {
        pattern = new RegExp(text, "i");
      } catch (e) {
        pattern = new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i");
      }
    }
    $("matched").textContent = pattern ? "matched: " + percent(matchedSamples(), root.v) +
      " of " + (unit === "samples" ? "samples" : "the total") : "";
    render();
  }

  // --- drawing --------------------------------------------------------------------------------
  var focus = root;
  var drawn = false;
  function render() {
    var width = Math.max((graph.clientWidth || 1200) - 2, 300);
    var icicle = $("icicle").checked;
    var frames = []; // [node, x, width]
    for (var up = focus; up; up = up.p) {
      frames.push([up, 0, width]);
    }
    var deepest = focus.d;
    var todo = [[focus, 0]];
    while (todo.length) {
      var item = todo.pop(), node = item[0], at = item[1];
      var kids = children(node);
      for (var i = 0; i < kids.length; i++) {
        var w = kids[i].v / (focus.v || 1) * width;
        if (w >= MIN_WIDTH && kids[i].d <= MAX_ROWS) {
          frames.push([kids[i], at, w]);
          deepest = Math.max(deepest, kids[i].d);
          todo.push([kids[i], at]);
        }
        at += w;
      }
    }
    var group = document.createElementNS(SVGNS, "g");
    frames.forEach(function (frame) {
      var node = frame[0], x = frame[1], w = frame[2];
      var y = (icicle ? node.d : deepest - node.d) * ROW;
      var rect = document.createElementNS(SVGNS, "rect");
      rect.setAttribute("x", x.toFixed(1));
      rect.setAttribute("y", String(y));
      rect.setAttribute("width", Math.max(w, 1).toFixed(1));
      rect.setAttribute("height", String(ROW - 1));
      rect.setAttribute("fill", color(node));
      if (matches(node)) {
        rect.setAttribute("class", "match");
      }
      frameOf.set(rect, node);
      group.appendChild(rect);
      var chars = Math.floor((w - 6) / CHAR);
      if (chars >= 3) {
        var name = visible(node);
        var label = document.createElementNS(SVGNS, "text");
        label.setAttribute("x", (x + 3).toFixed(1));
        label.setAttribute("y", String(y + ROW - 5));
        label.textContent = name.length <= chars ? name : name.slice(0, chars - 2) + "..";
        group.appendChild(label);
      }
    });
    while (svg.firstChild) {
      svg.removeChild(svg.firstChild);
    }
    svg.setAttribute("width", String(width));
    svg.setAttribute("height", String((deepest + 1) * ROW));
    svg.appendChild(group);
    $("focus").textContent = focus === root ? "" : "zoomed into " + clip(visible(focus), 200);
    $("reset").disabled = focus === root && !pattern;
    // Deep stacks: show where they start (the root) first; the rest is a scroll away.
    graph.scrollTop = icicle ? 0 : graph.scrollHeight;
    if (!drawn) {
      drawn = true;
      performance.mark("flamegraph-drawn");
    }
  }

  function reset() {
    focus = root;
    if (searchBox.value) {
      searchBox.value = "";
      search();
    } else {
      render();
    }
  }

  // --- header -----------------------------------------------------------------------------------
  function fact(label, text, id) {
    var span = document.createElement("span");
    var b = document.createElement("b");
    b.textContent = label + ": ";
    span.appendChild(b);
    span.appendChild(document.createTextNode(text));
    if (id) {
      span.id = id;
    }
    $("facts").appendChild(span);
  }
  document.title = data.title + " - flame graph";
  $("title").textContent = data.title;
  (data.facts || []).forEach(function (pair) { fact(pair[0], pair[1]); });
  if (differential) {
    fact(unit === "samples" ? "samples" : "total", "A " + amount(root.b) + ", B " +
      amount(root.v) + (scale === 1 ? "" : " (A scaled \u00d7" + figure(scale) +
      " to compare)"), "samples");
    $("legend").hidden = false;
  } else {
    fact(unit === "samples" ? "samples" : "total", unit === "samples" ? String(root.v) :
      amount(root.v), "samples");
  }
  if (data.named) {
    fact("named frames", (100 * data.named.share).toFixed(1) + " %" + (data.named.source ===
      "meta.json" ? " (from the recording)" : " (computed from the frame names)"), "named");
  }
  [["notes", "note"], ["warnings", "warning"]].forEach(function (kind) {
    (data[kind[0]] || []).forEach(function (text) {
      var li = document.createElement("li");
      li.className = kind[1];
      li.textContent = kind[1] + ": " + text;
      $("notes").appendChild(li);
    });
  });

  // --- downloads (made here: the page works as a file, without a server) ------------------------
  var stem = String(data.name || "profile").replace(/[^A-Za-z0-9._-]+/g, "_").slice(0, 100);
  function save(blob, suffix) {
    var a = document.createElement("a");
    a.href = URL.createObjectURL(blob);
    a.download = stem + suffix;
    document.body.appendChild(a);
    a.click();
    a.remove();
    setTimeout(function () { URL.revokeObjectURL(a.href); }, 60000);
  }
  function foldedText() {
    var lines = [];
    for (var i = 0; i < stacks.length; i++) {
      var stack = stacks[i].map(function (n) { return names[n]; }).join(";");
      // difffolded.pl -n's form: A scaled to B's total
      lines.push(stack + (differential ? " " + Math.round(data.before[i] * scale) : "") + " " +
        data.counts[i]);
    }
    return lines.join("\n") + "\n";
  }
  var SPEEDSCOPE_UNITS = {"samples": "none", "ns": "nanoseconds", "\u00b5s": "microseconds",
    "ms": "milliseconds", "s": "seconds", "bytes": "bytes"};
  function speedscope() {
    return JSON.stringify({
      "$schema": "https://www.speedscope.app/file-format-schema.json",
      name: data.title, exporter: "sidecar-debug", activeProfileIndex: 0,
      shared: {frames: names.map(function (name) { return {name: name}; })},
      profiles: [{type: "sampled", name: data.title, unit: SPEEDSCOPE_UNITS[unit] || "none",
        startValue: 0, endValue: root.v, samples: stacks, weights: data.counts}]
    });
  }
  // profile.proto (github.com/google/pprof proto/profile.proto), as webhook/stacks/pprof.py
  // writes it: one function and one location per frame name, locations leaf first.
  function pprof() {
    var out = [];
    function varint(into, value) {
      while (value >= 128) {
        into.push(value % 128 + 128);
        value = Math.floor(value / 128);
      }
      into.push(value);
    }
    function key(into, number, wire) {
      varint(into, number * 8 + wire);
    }
    function int(into, number, value) {
      if (value) {
        key(into, number, 0);
        varint(into, value);
      }
    }
    function bytes(into, number, payload) {
      key(into, number, 2);
      varint(into, payload.length);
      for (var i = 0; i < payload.length; i++) {
        into.push(payload[i]);
      }
    }
    var strings = ["", unit === "samples" ? "samples" : "total",
      unit === "samples" ? "count" : SPEEDSCOPE_UNITS[unit] || unit];
    var valueType = [];
    int(valueType, 1, 1);
    int(valueType, 2, 2);
    bytes(out, 1, valueType);
    stacks.forEach(function (stack, i) {
      var ids = [], values = [], sample = [];
      for (var j = stack.length - 1; j >= 0; j--) {
        varint(ids, stack[j] + 1);
      }
      varint(values, Math.round(data.counts[i])); // profile.proto's values are integers
      bytes(sample, 1, ids);
      bytes(sample, 2, values);
      bytes(out, 2, sample);
    });
    names.forEach(function (name, i) {
      var line = [], location = [], fn = [];
      int(line, 1, i + 1);
      int(location, 1, i + 1);
      bytes(location, 4, line);
      bytes(out, 4, location);
      int(fn, 1, i + 1);
      int(fn, 2, strings.length + i);
      int(fn, 3, strings.length + i);
      bytes(out, 5, fn);
    });
    var encoder = new TextEncoder();
    strings.concat(names).forEach(function (text) { bytes(out, 6, encoder.encode(text)); });
    return new Uint8Array(out);
  }
  function download(format) {
    if (format === "folded") {
      save(new Blob([foldedText()], {type: "text/plain"}), differential ? ".diff.folded" :
        ".folded");
    } else if (format === "speedscope") {
      save(new Blob([speedscope()], {type: "application/json"}), ".speedscope.json");
    } else if (format === "pprof") {
      var raw = new Blob([pprof()], {type: "application/octet-stream"});
      if (typeof CompressionStream === "undefined") {
        save(raw, ".pb");
        return;
      }
      new Response(raw.stream().pipeThrough(new CompressionStream("gzip"))).blob().then(
        function (gz) { save(gz, ".pb.gz"); });
    }
  }
  if (differential) {
    document.querySelectorAll("#downloads button.single").forEach(function (button) {
      button.hidden = true;
    });
  }

  // --- events ---------------------------------------------------------------------------------
  function frameAt(event) {
    return event.target && frameOf.get(event.target);
  }
  svg.addEventListener("click", function (event) {
    var node = frameAt(event);
    if (node) {
      focus = node === focus && node.p ? node.p : node;
      render();
    }
  });
  svg.addEventListener("mousemove", function (event) {
    var node = frameAt(event);
    if (!node) {
      tip.hidden = true;
      return;
    }
    tip.textContent = describe(node, TIP_CHARS);
    details.textContent = describe(node, 300).replace("\n", ": ");
    tip.hidden = false;
    var x = event.clientX + 14, y = event.clientY + 14;
    if (x + tip.offsetWidth > window.innerWidth) {
      x = Math.max(0, event.clientX - tip.offsetWidth - 8);
    }
    if (y + tip.offsetHeight > window.innerHeight) {
      y = Math.max(0, event.clientY - tip.offsetHeight - 8);
    }
    tip.style.left = x + "px";
    tip.style.top = y + "px";
  });
  svg.addEventListener("mouseleave", function () { tip.hidden = true; });
  searchBox.addEventListener("input", search);
  $("reset").addEventListener("click", reset);
  $("order").addEventListener("change", function () {
    order = $("order").value;
    render();
  });
  $("icicle").addEventListener("change", render);
  $("downloads").addEventListener("click", function (event) {
    var format = event.target && event.target.getAttribute("data-format");
    if (format) {
      download(format);
    }
  });
  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape") {
      tip.hidden = true;
      reset();
    }
  });
  var pending = false;
  window.addEventListener("resize", function () {
    if (!pending) {
      pending = true;
      requestAnimationFrame(function () {
        pending = false;
        render();
      });
    }
  });
  // A reload keeps what the controls held (the browser restores form values): start from them.
  order = $("order").value === "weight" ? "weight" : "name";
  if (searchBox.value.trim()) {
    search();
  } else {
    render();
  }
})();
