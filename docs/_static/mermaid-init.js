/* queuewire: draw the page's Mermaid diagrams with mermaid's classic build.

   A classic script (not an ES module) beside mermaid.min.js, which defines the global
   `mermaid`: Chromium refuses ES modules from file://, a classic script loads, so the site
   draws its diagrams opened from disk as well as served (docs/conf.py says why this and not
   the extension's module loader). Each <pre class="mermaid"> (sphinxcontrib-mermaid writes
   them) is replaced by its SVG; the source is kept here, not in the DOM, so the diagram can
   be drawn again when furo's theme switches between light and dark. */
(function () {
  "use strict";
  var sources = [];
  var pending = Promise.resolve();  // mermaid.run is not safe to call while a run is going

  function dark() {
    var theme = document.body.dataset.theme;  // furo: "light", "dark" or "auto"
    if (theme === "dark" || theme === "light") {
      return theme === "dark";
    }
    return !!(window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches);
  }

  function draw() {
    var nodes = sources.map(function (entry) {
      entry.node.removeAttribute("data-processed");
      entry.node.textContent = entry.code;
      return entry.node;
    });
    mermaid.initialize({startOnLoad: false, theme: dark() ? "dark" : "default"});
    return mermaid.run({nodes: nodes}).catch(function (error) {
      console.error("mermaid could not draw a diagram:", error);
    });
  }

  function start() {
    if (typeof mermaid === "undefined") {
      console.error("mermaid.min.js did not load: the diagrams stay as their source");
      return;
    }
    document.querySelectorAll("pre.mermaid").forEach(function (node) {
      sources.push({node: node, code: node.textContent});
    });
    if (!sources.length) {
      return;
    }
    var drawn = dark();
    pending = pending.then(draw);
    new MutationObserver(function () {
      if (dark() !== drawn) {
        drawn = dark();
        pending = pending.then(draw);
      }
    }).observe(document.body, {attributes: true, attributeFilter: ["data-theme"]});
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
