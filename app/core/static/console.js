// Cairn console: a small progressive-enhancement layer. Every page works without it.
"use strict";
document.addEventListener("submit", (event) => {
  // Forms that change or delete something ask first (data-confirm="question").
  const form = event.target;
  // A form with a dry-run box may ask another question for a dry run (data-confirm-dry).
  const dry = form.querySelector("input[name=dry_run]");
  const question = dry && dry.checked && form.hasAttribute("data-confirm-dry")
    ? form.getAttribute("data-confirm-dry")
    : form.getAttribute("data-confirm");
  if (question && !window.confirm(question)) event.preventDefault();
});
document.addEventListener("change", (event) => {
  // A picker (select data-autosubmit) sends its form as soon as a choice is made.
  const select = event.target.closest("select[data-autosubmit]");
  if (select && select.form) select.form.requestSubmit();
});
document.addEventListener("click", (event) => {
  // Copy buttons (data-copy="#id") copy an element's text, e.g. a key shown once.
  const button = event.target.closest("[data-copy]");
  if (!button) return;
  const source = document.querySelector(button.getAttribute("data-copy"));
  if (source && navigator.clipboard) navigator.clipboard.writeText(source.textContent.trim());
});
window.addEventListener("DOMContentLoaded", () => {
  // A neighbourhood graph: <div class="graph" data-graph="#json-element-id"> drawn with Cytoscape.js.
  for (const box of document.querySelectorAll("[data-graph]")) {
    const source = document.querySelector(box.getAttribute("data-graph"));
    if (!source || typeof window.cytoscape !== "function") continue;
    const data = JSON.parse(source.textContent);
    const cy = window.cytoscape({
      container: box,
      elements: data.elements,
      layout: { name: "cose", animate: false, randomize: false, padding: 20 },
      style: [
        { selector: "node", style: { label: "data(label)", "font-size": 11, "background-color": "#1f5fa8", color: "#1d232a", "text-valign": "bottom", "text-margin-y": 4, width: 18, height: 18 } },
        { selector: "node.focus", style: { "background-color": "#d07a00", width: 26, height: 26, "font-weight": "bold" } },
        { selector: "edge", style: { label: "data(label)", "font-size": 9, width: 1.5, "line-color": "#9aa7b3", "target-arrow-color": "#9aa7b3", "target-arrow-shape": "triangle", "curve-style": "bezier", color: "#5b6670" } },
      ],
    });
    cy.on("tap", "node", (evt) => {
      const href = evt.target.data("href");
      if (href) window.location.href = href;
    });
    box.setAttribute("data-ready", String(cy.nodes().length));
  }
});
