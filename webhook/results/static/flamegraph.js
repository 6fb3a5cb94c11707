// sidecar-debug results page: an interactive flame graph in plain JavaScript and SVG.
// Reads the profile from <script id="profile" type="application/json"> ({tree, differential}),
// a tree of {n: name, v: samples, b: samples before (differential), c: children}. Root at
// the top, callees below; click a frame to zoom into it, "reset zoom" or the root to zoom out;
// the search box (a regular expression, or plain text when it is not one) highlights matching
// frames and says which share of the samples they hold. Names are drawn with textContent only.
(function () {
  "use strict";
  var SVGNS = "http://www.w3.org/2000/svg";
  var ROW = 18;
  var CHAR = 7; // px per character at 12px monospace
  var source = document.getElementById("profile");
  var svg = document.getElementById("flame");
  if (!source || !svg) {
    return;
  }
  var data = JSON.parse(source.textContent);
  var differential = !!data.differential;
  var root = data.tree;
  var details = document.getElementById("details");
  var searchBox = document.getElementById("search");
  var matchedText = document.getElementById("matched");
  var resetButton = document.getElementById("reset");
  var focus = root;
  var pattern = null;

  function prepare(node, parent, depth) {
    node.parent = parent;
    node.depth = depth;
    (node.c || []).forEach(function (child) { prepare(child, node, depth + 1); });
  }
  prepare(root, null, 0);

  function hash(text) {
    var h = 0;
    for (var i = 0; i < text.length; i++) {
      h = (h * 31 + text.charCodeAt(i)) | 0;
    }
    return Math.abs(h);
  }

  function color(node) {
    if (differential) {
      var before = node.b || 0;
      var delta = node.v - before;
      if (Math.abs(delta) < 1) {
        return "rgb(225,225,225)";
      }
      var strength = Math.min(1, Math.abs(delta) / Math.max(before, node.v, 1));
      var c = Math.round(225 - 165 * strength);
      return delta > 0 ? "rgb(255," + c + "," + c + ")" : "rgb(" + c + "," + c + ",255)";
    }
    if (node.n.indexOf("[k]") >= 0) {
      return "hsl(" + (180 + hash(node.n) % 30) + ",55%,65%)";
    }
    return "hsl(" + (hash(node.n) % 55) + ",80%," + (55 + hash(node.n) % 15) + "%)";
  }

  function percent(value) {
    return (100 * value / (root.v || 1)).toFixed(2) + " %";
  }

  function describe(node) {
    if (differential) {
      var before = node.b || 0;
      var delta = node.v - before;
      return node.n + ": A " + before + ", B " + node.v + " samples (" +
        (delta >= 0 ? "+" : "") + delta + ")";
    }
    return node.n + ": " + node.v + " samples (" + percent(node.v) + ")";
  }

  function matches(node) {
    return pattern !== null && pattern.test(node.n);
  }

  function draw(node, x, width, group) {
    var g = document.createElementNS(SVGNS, "g");
    g.setAttribute("class", matches(node) ? "frame match" : "frame");
    var title = document.createElementNS(SVGNS, "title");
    title.textContent = describe(node);
    g.appendChild(title);
    var rect = document.createElementNS(SVGNS, "rect");
    rect.setAttribute("x", x.toFixed(2));
    rect.setAttribute("y", String(node.depth * ROW));
    rect.setAttribute("width", Math.max(width, 0.5).toFixed(2));
    rect.setAttribute("height", String(ROW - 1));
    rect.setAttribute("fill", color(node));
    g.appendChild(rect);
    var chars = Math.floor((width - 6) / CHAR);
    if (chars >= 3) {
      var label = document.createElementNS(SVGNS, "text");
      label.setAttribute("x", (x + 3).toFixed(2));
      label.setAttribute("y", String(node.depth * ROW + ROW - 5));
      label.textContent = node.n.length <= chars ? node.n : node.n.slice(0, chars - 2) + "..";
      g.appendChild(label);
    }
    g.addEventListener("click", function () {
      focus = node === focus ? (node.parent || root) : node;
      render();
    });
    g.addEventListener("mouseover", function () {
      if (details) {
        details.textContent = describe(node);
      }
    });
    group.appendChild(g);
  }

  function render() {
    var width = svg.clientWidth || (svg.parentNode && svg.parentNode.clientWidth) || 1200;
    var group = document.createElementNS(SVGNS, "g");
    var total = focus.v || 1;
    var deepest = 0;
    var chain = [];
    for (var n = focus; n; n = n.parent) {
      chain.unshift(n);
    }
    chain.forEach(function (node) {
      draw(node, 0, width, group);
      deepest = Math.max(deepest, node.depth);
    });
    (function walk(node, x) {
      var at = x;
      (node.c || []).forEach(function (child) {
        var w = child.v / total * width;
        if (w >= 0.3) {
          draw(child, at, w, group);
          deepest = Math.max(deepest, child.depth);
          walk(child, at);
        }
        at += w;
      });
    })(focus, 0);
    while (svg.firstChild) {
      svg.removeChild(svg.firstChild);
    }
    svg.setAttribute("height", String((deepest + 1) * ROW));
    svg.appendChild(group);
    svg.setAttribute("data-focus", focus.n);
  }

  function matchedSamples(node) {
    if (matches(node)) {
      return node.v;
    }
    var sum = 0;
    (node.c || []).forEach(function (child) { sum += matchedSamples(child); });
    return sum;
  }

  function search() {
    var text = searchBox ? searchBox.value.trim() : "";
    if (!text) {
      pattern = null;
    } else {
      try {
        pattern = new RegExp(text, "i");
      } catch (e) {
        pattern = new RegExp(text.replace(/[.*+?^${}()|[\]\\]/g, "\\$&"), "i");
      }
    }
    if (matchedText) {
      matchedText.textContent = pattern ? "matched: " + percent(matchedSamples(root)) +
        " of samples" : "";
    }
    render();
  }

  if (searchBox) {
    searchBox.addEventListener("input", search);
  }
  if (resetButton) {
    resetButton.addEventListener("click", function () {
      focus = root;
      render();
    });
  }
  window.addEventListener("resize", render);
  render();
})();
