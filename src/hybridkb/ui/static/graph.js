// hybridkb ui: a node's neighbourhood drawn as SVG with a small force layout.
// Pan (drag the background), zoom (wheel), select (click), expand (double-click or
// the list's "Expand"), relations filtered by the checkboxes. No library.
"use strict";

window.hybridkbGraph = function () {
  const svg = document.getElementById("graph");
  const NS = "http://www.w3.org/2000/svg";
  const palette = ["#0a58ca", "#b42318", "#116329", "#7a4d00", "#6f42c1", "#0b7285", "#c2255c", "#495057"];
  const colours = new Map();
  const nodes = new Map();   // id -> {id, type, label, properties, x, y, vx, vy}
  const edges = new Map();   // key -> {source, target, type, provenance}
  let selected = null;
  let view = { x: -400, y: -300, w: 800, h: 600 };
  const hidden = new Set();

  function colour(type) {
    if (!colours.has(type)) colours.set(type, palette[colours.size % palette.length]);
    return colours.get(type);
  }

  function merge(data, around) {
    const origin = around ? nodes.get(around) : null;
    for (const n of data.nodes) {
      if (!nodes.has(n.id)) {
        const angle = Math.random() * 2 * Math.PI;
        const r = origin ? 60 : 150 * Math.random();
        nodes.set(n.id, Object.assign({}, n, {
          x: (origin ? origin.x : 0) + r * Math.cos(angle),
          y: (origin ? origin.y : 0) + r * Math.sin(angle), vx: 0, vy: 0,
        }));
      }
    }
    for (const e of data.edges) edges.set(e.source + "\u0000" + e.target + "\u0000" + e.type, e);
    for (const e of data.edges) addTypeBox(e.type);
  }

  function addTypeBox(type) {
    const box = document.querySelector("[data-types]");
    if (!box || box.querySelector('input[value="' + CSS.escape(type) + '"]')) return;
    const label = document.createElement("label");
    const input = document.createElement("input");
    input.type = "checkbox"; input.value = type; input.checked = !hidden.has(type);
    input.dataset.type = "";
    input.addEventListener("change", onType);
    label.append(input, " " + type);
    box.appendChild(label);
  }

  function visibleEdges() {
    return Array.from(edges.values()).filter((e) => !hidden.has(e.type) && nodes.has(e.source) && nodes.has(e.target));
  }

  function layout(steps) {
    const list = Array.from(nodes.values());
    const links = visibleEdges();
    for (let step = 0; step < steps; step++) {
      const cool = 1 - step / steps;
      for (let i = 0; i < list.length; i++) {
        for (let j = i + 1; j < list.length; j++) {
          const a = list[i], b = list[j];
          let dx = a.x - b.x, dy = a.y - b.y;
          let d2 = dx * dx + dy * dy || 0.01;
          const f = 5000 / d2;
          const d = Math.sqrt(d2);
          dx /= d; dy /= d;
          a.vx += dx * f; a.vy += dy * f; b.vx -= dx * f; b.vy -= dy * f;
        }
      }
      for (const e of links) {
        const a = nodes.get(e.source), b = nodes.get(e.target);
        const dx = b.x - a.x, dy = b.y - a.y;
        const d = Math.sqrt(dx * dx + dy * dy) || 0.01;
        const f = (d - 130) * 0.03;
        a.vx += dx / d * f; a.vy += dy / d * f; b.vx -= dx / d * f; b.vy -= dy / d * f;
      }
      for (const n of list) {
        n.vx -= n.x * 0.004; n.vy -= n.y * 0.004;   // a weak pull to the middle
        const speed = Math.min(12 * cool + 0.5, Math.sqrt(n.vx * n.vx + n.vy * n.vy));
        const norm = Math.sqrt(n.vx * n.vx + n.vy * n.vy) || 1;
        n.x += n.vx / norm * speed; n.y += n.vy / norm * speed;
        n.vx *= 0.5; n.vy *= 0.5;
      }
    }
  }

  function fit() {
    const list = Array.from(nodes.values());
    if (!list.length) return;
    let x0 = Infinity, y0 = Infinity, x1 = -Infinity, y1 = -Infinity;
    for (const n of list) { x0 = Math.min(x0, n.x); y0 = Math.min(y0, n.y); x1 = Math.max(x1, n.x); y1 = Math.max(y1, n.y); }
    const pad = 80, ratio = (svg.clientWidth || 800) / (svg.clientHeight || 600);
    let w = Math.max(x1 - x0 + 2 * pad + 120, 300), h = Math.max(y1 - y0 + 2 * pad, 220);
    if (w / h > ratio) h = w / ratio; else w = h * ratio;
    view = { x: (x0 + x1) / 2 - w / 2 + 40, y: (y0 + y1) / 2 - h / 2, w: w, h: h };
  }

  function draw() {
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    const g = document.createElementNS(NS, "g");
    for (const e of visibleEdges()) {
      const a = nodes.get(e.source), b = nodes.get(e.target);
      const line = document.createElementNS(NS, "line");
      line.setAttribute("class", "edge");
      line.setAttribute("x1", a.x); line.setAttribute("y1", a.y);
      line.setAttribute("x2", b.x); line.setAttribute("y2", b.y);
      const title = document.createElementNS(NS, "title");
      title.textContent = e.source + " —" + e.type + "→ " + e.target + " (" + e.provenance + ")";
      line.appendChild(title);
      g.appendChild(line);
    }
    for (const n of nodes.values()) {
      const group = document.createElementNS(NS, "g");
      group.setAttribute("class", "node" + (n.id === selected ? " selected" : "") + (n.id === center ? " center" : ""));
      group.setAttribute("transform", "translate(" + n.x + "," + n.y + ")");
      group.dataset.node = n.id;
      const circle = document.createElementNS(NS, "circle");
      circle.setAttribute("r", n.id === center ? 11 : 8);
      circle.setAttribute("fill", colour(n.type));
      const text = document.createElementNS(NS, "text");
      text.setAttribute("x", 12); text.setAttribute("y", 4);
      text.textContent = n.label.length > 28 ? n.label.slice(0, 27) + "…" : n.label;
      const title = document.createElementNS(NS, "title");
      title.textContent = n.type + ": " + n.label;
      group.append(circle, text, title);
      group.addEventListener("click", (ev) => { ev.stopPropagation(); select(n.id); });
      group.addEventListener("dblclick", (ev) => { ev.stopPropagation(); expand(n.id); });
      g.appendChild(group);
    }
    svg.appendChild(g);
    svg.setAttribute("viewBox", [view.x, view.y, view.w, view.h].join(" "));
  }

  function select(id) {
    selected = id;
    const n = nodes.get(id);
    const box = document.querySelector("[data-selected]");
    box.textContent = "";
    const h = document.createElement("p");
    const strong = document.createElement("strong");
    strong.textContent = n.label;
    h.append(strong, " (" + n.type + ")");
    const code = document.createElement("p");
    code.className = "path"; code.textContent = n.id;
    box.append(h, code);
    const props = document.createElement("dl");
    props.className = "facts";
    for (const [k, v] of Object.entries(n.properties || {})) {
      const div = document.createElement("div");
      const dt = document.createElement("dt"); dt.textContent = k;
      const dd = document.createElement("dd"); dd.textContent = v;
      div.append(dt, dd); props.appendChild(div);
    }
    box.appendChild(props);
    const touching = visibleEdges().filter((e) => e.source === id || e.target === id);
    if (touching.length) {
      const ul = document.createElement("ul");
      ul.className = "small";
      for (const e of touching.slice(0, 30)) {
        const li = document.createElement("li");
        const other = e.source === id ? e.target : e.source;
        li.textContent = (e.source === id ? "→ " : "← ") + e.type + " " + (nodes.get(other) || {}).label + " — " + e.provenance;
        ul.appendChild(li);
      }
      box.appendChild(ul);
    }
    const expandButton = document.createElement("button");
    expandButton.type = "button"; expandButton.className = "quiet small";
    expandButton.textContent = "Expand " + n.label;
    expandButton.addEventListener("click", () => expand(id));
    box.appendChild(expandButton);
    draw();
  }

  async function expand(id) {
    const types = Array.from(document.querySelectorAll("[data-type]")).filter((c) => c.checked).map((c) => c.value);
    const params = new URLSearchParams({ node: id });
    const response = await fetch("/graph.json?" + params, { credentials: "same-origin" });
    const data = await response.json();
    const status = document.querySelector("[data-selected]");
    if (data.error) { const p = document.createElement("p"); p.className = "error"; p.textContent = data.error; status.prepend(p); return; }
    const before = nodes.size;
    merge(data, id);
    layout(150);
    fit();
    relist();
    select(id);
    const note = document.createElement("p");
    note.setAttribute("role", "status");
    note.className = "small muted";
    const added = nodes.size - before;
    note.textContent = "Added " + added + (added === 1 ? " node" : " nodes") + " around " + nodes.get(id).label + (data.truncated ? " (capped)" : "") + ".";
    status.prepend(note);
    void types;
  }

  function relist() {
    const list = document.querySelector("[data-node-list]");
    list.textContent = "";
    for (const n of nodes.values()) {
      const li = document.createElement("li");
      li.dataset.nodeItem = n.id;
      const pick = document.createElement("button");
      pick.type = "button"; pick.className = "link"; pick.textContent = n.label;
      pick.addEventListener("click", () => select(n.id));
      const type = document.createElement("span");
      type.className = "muted small"; type.textContent = " " + n.type + " ";
      const grow = document.createElement("button");
      grow.type = "button"; grow.className = "quiet small"; grow.textContent = "Expand";
      grow.dataset.expand = n.id;
      grow.addEventListener("click", () => expand(n.id));
      li.append(pick, type, grow);
      list.appendChild(li);
    }
    const body = document.querySelector("[data-edge-list]");
    body.textContent = "";
    for (const e of visibleEdges()) {
      const tr = document.createElement("tr");
      tr.dataset.edgeType = e.type;
      const name = (id) => (nodes.get(id) || { label: id }).label;
      for (const cell of [name(e.source), e.type, name(e.target), e.provenance]) {
        const td = document.createElement("td"); td.textContent = cell; tr.appendChild(td);
      }
      body.appendChild(tr);
    }
  }

  function onType(event) {
    if (event.target.checked) hidden.delete(event.target.value); else hidden.add(event.target.value);
    relist();
    draw();
  }

  // Pan and zoom.
  let drag = null;
  svg.addEventListener("pointerdown", (ev) => {
    if (ev.target !== svg) return;
    drag = { x: ev.clientX, y: ev.clientY, vx: view.x, vy: view.y };
    svg.setPointerCapture(ev.pointerId);
  });
  svg.addEventListener("pointermove", (ev) => {
    if (!drag) return;
    const scale = view.w / svg.clientWidth;
    view.x = drag.vx - (ev.clientX - drag.x) * scale;
    view.y = drag.vy - (ev.clientY - drag.y) * scale;
    svg.setAttribute("viewBox", [view.x, view.y, view.w, view.h].join(" "));
  });
  svg.addEventListener("pointerup", () => { drag = null; });
  svg.addEventListener("wheel", (ev) => {
    ev.preventDefault();
    const factor = ev.deltaY > 0 ? 1.15 : 1 / 1.15;
    const cx = view.x + view.w / 2, cy = view.y + view.h / 2;
    view.w *= factor; view.h *= factor;
    view.x = cx - view.w / 2; view.y = cy - view.h / 2;
    svg.setAttribute("viewBox", [view.x, view.y, view.w, view.h].join(" "));
  }, { passive: false });

  // The neighbourhood the page starts from came with it (no request to wait for).
  let center = null;
  const status = document.querySelector("[data-graph-status]");
  const initial = JSON.parse(document.getElementById("graph-data").textContent);
  if (initial.error) {
    status.className = "error";
    status.setAttribute("role", "alert");
    status.textContent = initial.error;
    return;
  }
  center = initial.center;
  merge(initial, null);
  if (nodes.has(center)) { const c = nodes.get(center); c.x = 0; c.y = 0; }
  layout(250);
  fit();
  draw();
  relist();
  status.textContent = nodes.size + " nodes around " + (nodes.get(center) || { label: center }).label +
    (initial.truncated ? " (only the first neighbours are shown)" : "") + ".";
};
