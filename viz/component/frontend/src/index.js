// RadixLens tree view: a Streamlit v2 component that draws a laid-out tree (viz/layout.py's
// scene: nodes {id, x, y, w, h, label, fill, stroke, stroke_width, dashed, tooltip, role} and
// edges {id, source, target, label, label_x, label_y, stroke, stroke_width}) as plain SVG and
// animates between scenes with d3-transition. Elements are keyed by
// their stable ids (node n<id>, edge e<child id>): a node that moved slides to its new place, a
// split edge re-bends to its new ends, new nodes and edges grow in from their parent, removed
// ones fade out; unchanged elements are not touched at all. A click on a node sends its id back
// to Python as the trigger value `clicked`. Wheel zooms, drag pans, double click fits; labels
// are not drawn while they would be under 4 px on screen; a box whose text came out wider than
// the layout's estimate is widened to fit it (no clipped label). An edge's line stops short of
// its label and resumes under it (no line through the text). With min_font_px (presenter
// mode: 14) the fitted view never scales the smallest label under that size: a tree too big
// for the host at that scale is drawn at that scale in a scrolling host (scrollbars: what is
// out of view is visibly there), scrolled to its highlighted nodes (or its newest node); wheel
// and drag then scroll instead of zooming and panning. The host div carries data-scroll,
// data-nodes,
// data-draw-ms (data in -> elements in place), data-settle-ms (-> transition ended),
// data-animating and data-renders for tests and the benchmark (a state value would rerun the
// script on every draw). Optional node fields: `text` (label colour; default #222), `move` (a
// tier move: "demote" / "backup" send a `move_fill` copy of the box down toward the host,
// "load" / "restore" bring one up from below; the box's fill fades from its old colour to the
// new one) shown as data-move; the host counts the moves played in data-moves and names the
// last in data-last-move ("n3 load #1f77b4").
import { select } from "d3-selection";
import "d3-transition";

const SVG = "http://www.w3.org/2000/svg";
const PAD = 8;
const MAX_SCALE = 1.5; // default: a small tree (a lone root too) is not blown up past this
const FALLBACK_W = 700; // px assumed while the host is not laid out (a hidden tab reads 0)
const MIN_FONT_PX = 4; // smaller on screen: labels and arrowheads are not drawn (unreadable)
const NODE_FONT = 11, EDGE_FONT = 9; // label sizes in scene units (viz/layout.py's)
const LABEL_GAP = 2; // scene units between an edge label's box and its line
const states = new WeakMap();
const MOVE_DIR = { demote: 1, backup: 1, load: -1, restore: -1 }; // +1: down, to the host

function stateFor(parentElement) {
  let state = states.get(parentElement);
  if (state) return state;
  const host = document.createElement("div");
  host.className = "radixlens-tree";
  host.style.width = "100%";
  parentElement.appendChild(host);
  const svg = select(host).append("svg").attr("xmlns", SVG)
    .attr("preserveAspectRatio", "xMidYMin meet")
    .style("width", "100%").style("height", "100%").style("display", "block");
  svg.append("style").text(
    ".rl-small text { display: none; } .rl-small path { marker-end: none; }");
  svg.append("defs").append("marker").attr("id", "radixlens-arrow")
    .attr("viewBox", "0 0 10 10").attr("refX", 10).attr("refY", 5)
    .attr("markerWidth", 5).attr("markerHeight", 5).attr("orient", "auto-start-reverse")
    .append("path").attr("d", "M0,0L10,5L0,10z").attr("fill", "context-stroke");
  const edges = svg.append("g").attr("class", "edges");
  const nodes = svg.append("g").attr("class", "nodes");
  state = { host, svg, edges, nodes, lastSig: null, animating: false, callbacks: {}, seq: 0 };
  enableZoom(state);
  // a host first drawn while hidden (0 px wide) or resized later refits, unless the user zoomed
  if (typeof ResizeObserver !== "undefined") {
    new ResizeObserver(() => {
      if (!state.scene || state.zoomed) return;
      const was = state.scroll, fit = fitBox(state, state.scene);
      if (state.fitView && fit.join(" ") === state.fitView.join(" ") && was === state.scroll) {
        return;
      }
      state.fitView = fit;
      sizeFor(state, state.scene, fit);
      setView(state, fit);
    }).observe(host);
  }
  host.addEventListener("click", (event) => {
    if (state.dragged) return;
    const node = event.target.closest && event.target.closest("g.node");
    if (!node || !node.id || !node.id.startsWith("n")) return;
    const id = Number(node.id.slice(1));
    if (Number.isInteger(id) && state.callbacks.setTriggerValue) {
      state.callbacks.setTriggerValue("clicked", id);
    }
  });
  states.set(parentElement, state);
  return state;
}

// Wheel zooms around the pointer, a drag pans, a double click fits the tree again; the user's
// view survives new scenes until then (labels come back once they are readable).
function setView(state, view) {
  state.view = view;
  state.svg.attr("viewBox", view.join(" "));
  state.svg.classed("rl-small", viewScale(state, view)[0] * EDGE_FONT < MIN_FONT_PX);
}

// px per scene unit and the left offset, as preserveAspectRatio="xMidYMin meet" draws it
function viewScale(state, v) {
  if (state.scroll) return [state.scroll, 0];
  const w = state.host.clientWidth || 1, h = state.host.clientHeight || Infinity;
  const k = Math.min(w / v[2], h / v[3]);
  return [k, (w - v[2] * k) / 2];
}

function enableZoom(state) {
  const host = state.host;
  const toScene = (event) => {
    const r = host.getBoundingClientRect(), v = state.view, [k, ox] = viewScale(state, v);
    return [v[0] + (event.clientX - r.left - ox) / k, v[1] + (event.clientY - r.top) / k, 1 / k];
  };
  host.addEventListener("wheel", (event) => {
    if (!state.view || state.scroll) return; // a scrolling host scrolls
    event.preventDefault();
    const [x, y] = toScene(event), f = Math.exp(event.deltaY * 0.002), v = state.view;
    state.zoomed = true;
    setView(state, [x - (x - v[0]) * f, y - (y - v[1]) * f, v[2] * f, v[3] * f]);
  }, { passive: false });
  host.addEventListener("pointerdown", (event) => {
    if (!state.view || state.scroll) return;
    const [, , k] = toScene(event), from = [event.clientX, event.clientY], v0 = state.view;
    state.dragged = false;
    const move = (e) => {
      const dx = (e.clientX - from[0]) * k, dy = (e.clientY - from[1]) * k;
      if (Math.abs(dx) + Math.abs(dy) < 3 * k && !state.dragged) return;
      state.dragged = state.zoomed = true;
      setView(state, [v0[0] - dx, v0[1] - dy, v0[2], v0[3]]);
    };
    const up = () => { host.removeEventListener("pointermove", move); };
    host.addEventListener("pointermove", move);
    host.addEventListener("pointerup", up, { once: true });
  });
  host.addEventListener("dblclick", () => {
    if (state.scroll) return;
    state.zoomed = false;
    if (state.fitView) setView(state, state.fitView);
  });
}

// the whole scene, widened (centred) or lengthened so it is never scaled past MAX_SCALE; a host
// not laid out yet counts as FALLBACK_W wide and its style height high. With a minimum label
// size the scale does not go under minFontPx / EDGE_FONT: a scene bigger than the host at that
// scale is then drawn whole at it and the host scrolls (state.scroll: that scale).
function fitBox(state, scene) {
  const w = scene.width + 2 * PAD, h = scene.height + 2 * PAD, host = state.host;
  const max = state.maxScale || MAX_SCALE;
  const hw = host.clientWidth || FALLBACK_W;
  const hh = host.clientHeight || parseFloat(host.style.height) || 0;
  const W = Math.max(w, hw / max), H = Math.max(h, hh / max);
  const kMin = (state.minFontPx || 0) / EDGE_FONT;
  state.scroll = !!kMin && !!hh && Math.min(hw / W, hh / H) < kMin ? kMin : 0;
  return state.scroll ? [-PAD, -PAD, w, h] : [-PAD - (W - w) / 2, -PAD, W, H];
}

// the svg's size and the host's overflow for the view: in a scrolling host the svg is the
// scene at state.scroll px a unit, scrolled to the focus (focusOf); else it fills the host
function sizeFor(state, scene, view) {
  const svg = state.svg.node(), host = state.host, k = state.scroll;
  host.dataset.scroll = k ? "1" : "0";
  host.style.overflow = k ? "auto" : "hidden";
  svg.style.width = k ? `${view[2] * k}px` : "100%";
  svg.style.height = k ? `${view[3] * k}px` : "100%";
  if (!k) return;
  const [fx, fy] = focusOf(scene);
  host.scrollLeft = Math.max(0, (fx - view[0]) * k - host.clientWidth / 2);
  host.scrollTop = Math.max(0, (fy - view[1]) * k - host.clientHeight / 2);
}

// the middle of the highlighted nodes (a role set), else the newest node (the highest id n<id>:
// the radix tree numbers its nodes as it makes them), else the first
function focusOf(scene) {
  const marked = scene.nodes.filter((n) => n.role);
  const num = (n) => (/^n\d+$/.test(n.id) ? Number(n.id.slice(1)) : -1);
  const newest = scene.nodes.reduce((a, n) => (a && num(a) >= num(n) ? a : n), null);
  const pick = marked.length ? marked : newest ? [newest] : [];
  if (!pick.length) return [0, 0];
  const xs = pick.map((n) => n.x), ys = pick.map((n) => n.y);
  return [(Math.min(...xs) + Math.max(...xs)) / 2, (Math.min(...ys) + Math.max(...ys)) / 2];
}

const place = (n, scale = 1) => `translate(${n.x},${n.y}) scale(${scale})`;
// what decides a node's or an edge's look (everything but its place)
const nodeStyle = (n) => [n.w, n.h, n.label, n.fill, n.stroke, n.stroke_width, n.dashed,
  n.tooltip, n.role, n.text, n.move, n.move_fill].join("|");
const edgeStyle = (e) => [e.label, e.label_x, e.label_y, e.stroke, e.stroke_width].join("|");

// a curve from a to the near side of the edge's label box `d` (label_x/y, label_w/h; none:
// to b), then a straight piece from its far side to b: the line never crosses the label. The
// same commands every time, so a transition interpolates any two of them.
function edgePath(a, b, lr, d) {
  const lw = (d && d.label_w) || 0, lh = (d && d.label_h) || 0;
  if (lr) {
    const x1 = a.x + a.w / 2, x2 = b.x - b.w / 2;
    const near = lw ? Math.max(x1, d.label_x - lw / 2 - LABEL_GAP) : x2;
    const far = lw ? Math.min(x2, d.label_x + lw / 2 + LABEL_GAP) : x2, m = (x1 + near) / 2;
    return `M${x1},${a.y}C${m},${a.y},${m},${b.y},${near},${b.y}M${far},${b.y}L${x2},${b.y}`;
  }
  const y1 = a.y + a.h / 2, y2 = b.y - b.h / 2;
  const near = lh ? Math.max(y1, d.label_y - lh / 2 - LABEL_GAP) : y2;
  const far = lh ? Math.min(y2, d.label_y + lh / 2 + LABEL_GAP) : y2, m = (y1 + near) / 2;
  return `M${a.x},${y1}C${a.x},${m},${b.x},${m},${b.x},${near}M${b.x},${far}L${b.x},${y2}`;
}

// a label wider than its box (the layout estimates text widths): widen the box around it
function fitText(g, d) {
  const text = g.select("text").node();
  if (!text || !text.getComputedTextLength) return;
  let width = 0;
  text.querySelectorAll("tspan").forEach((t) => {
    width = Math.max(width, t.getComputedTextLength());
  });
  if (width + 8 > d.w) {
    g.select("rect").attr("x", -(width + 8) / 2).attr("width", width + 8);
  }
}

function lines(text, sel, x, y, lineHeight) {
  const parts = String(text).split("\n");
  sel.selectAll("tspan").remove();
  parts.forEach((part, i) => {
    sel.append("tspan").attr("x", x)
      .attr("y", y + (i - (parts.length - 1) / 2) * lineHeight).text(part);
  });
}

function drawNodes(state, scene, t, moveAll) {
  const sel = state.nodes.selectAll("g.node").data(scene.nodes, (d) => d.id);
  sel.exit().classed("node", false).classed("exiting", true)
    .transition(t).style("opacity", 0).remove();
  const enter = sel.enter().append("g").attr("class", "node").attr("id", (d) => d.id)
    .style("cursor", "pointer").attr("transform", (d) => place(d, 0.01));
  enter.append("title");
  enter.append("rect");
  enter.append("text").attr("text-anchor", "middle").attr("dominant-baseline", "central")
    .attr("font-family", "DejaVu Sans, sans-serif").attr("font-size", NODE_FONT)
    .attr("fill", "#222");
  enter.transition(t).attr("transform", (d) => place(d));
  sel.each(function (d) {
    const old = this.__prevNode;
    if (moveAll || !old || old.x !== d.x || old.y !== d.y) {
      select(this).transition(t).attr("transform", place(d));
    }
  });
  enter.merge(sel).each(function (d) {
    const key = nodeStyle(d);
    if (this.__prevStyle === key) return;
    this.__prevStyle = key;
    const g = select(this).attr("data-role", d.role || null).attr("data-move", d.move || null);
    g.select("title").text(d.tooltip);
    const rect = g.select("rect").attr("x", -d.w / 2).attr("y", -d.h / 2).attr("width", d.w)
      .attr("height", d.h).attr("rx", 4).attr("stroke", d.stroke)
      .attr("stroke-width", d.stroke_width).attr("stroke-dasharray", d.dashed ? "4,2" : null);
    const before = this.__prevFill;
    this.__prevFill = d.fill;
    if (MOVE_DIR[d.move] && before && before !== d.fill) {
      rect.attr("fill", before).transition(t).attr("fill", d.fill);
    } else rect.interrupt("radixlens").attr("fill", d.fill);
    g.select("text").attr("fill", d.text || "#222");
    lines(d.label, g.select("text"), 0, 0, 13);
    fitText(g, d);
    if (MOVE_DIR[d.move]) playMove(state, g, d, t);
  }).each(function (d) { this.__prevNode = d; });
}

// a tier move: a copy of the box (move_fill) slides down (to the host) or up from below (to
// the device), fading; removed when its transition ends (a node's next move replaces it)
function playMove(state, g, d, t) {
  const dir = MOVE_DIR[d.move], shift = 1.4 * d.h;
  g.selectAll("rect.rl-move").remove();
  const ghost = g.insert("rect", "text").attr("class", "rl-move")
    .attr("x", -d.w / 2).attr("y", -d.h / 2).attr("width", d.w).attr("height", d.h)
    .attr("rx", 4).attr("fill", d.move_fill || d.fill).attr("stroke", "none")
    .style("pointer-events", "none").style("opacity", 0.85)
    .attr("transform", `translate(0,${dir > 0 ? 0 : shift})`);
  ghost.transition(t).attr("transform", `translate(0,${dir > 0 ? shift : 0})`)
    .style("opacity", 0).remove();
  state.host.dataset.moves = String(Number(state.host.dataset.moves || 0) + 1);
  state.host.dataset.lastMove = `${d.id} ${d.move} ${d.move_fill || d.fill}`;
}

function drawEdges(state, scene, byId, t, moveAll) {
  const lr = scene.rankdir === "LR";
  const sel = state.edges.selectAll("g.edge").data(scene.edges, (d) => d.id);
  sel.exit().classed("edge", false).classed("exiting", true)
    .transition(t).style("opacity", 0).remove();
  const enter = sel.enter().append("g").attr("class", "edge").attr("id", (d) => d.id);
  enter.append("path").attr("fill", "none").attr("marker-end", "url(#radixlens-arrow)")
    .attr("d", (d) => { const a = byId.get(d.source); return edgePath(a, a, lr); });
  // centred on label_y, as the layout's box for it (alphabetic baselines sit ~0.35 em higher)
  enter.append("text").attr("text-anchor", "middle").attr("dominant-baseline", "central")
    .attr("font-size", EDGE_FONT)
    .attr("font-family", "DejaVu Sans, sans-serif").attr("fill", "#333")
    .attr("stroke", "white").attr("stroke-width", 3).attr("stroke-linejoin", "round")
    .attr("paint-order", "stroke").style("opacity", 0);
  enter.select("text").transition(t).style("opacity", 1);
  enter.merge(sel).each(function (d) {
    const g = select(this);
    const path = edgePath(byId.get(d.source), byId.get(d.target), lr, d);
    if (moveAll || this.__prevPath !== path) {
      g.select("path").transition(t).attr("d", path);
      this.__prevPath = path;
    }
    const key = edgeStyle(d);
    if (!moveAll && this.__prevStyle === key) return;
    const changedPlace = this.__prevStyle !== undefined;
    this.__prevStyle = key;
    g.select("path").attr("stroke", d.stroke).attr("stroke-width", d.stroke_width);
    const text = g.select("text");
    if (text.text() !== d.label.replace(/\n/g, "")) lines(d.label, text, 0, 0, 11);
    const to = `translate(${d.label_x},${d.label_y})`;
    if (changedPlace) text.transition(t).attr("transform", to);
    else text.attr("transform", to);
  });
}

function draw(state, scene, durationMs) {
  const started = performance.now();
  const seq = ++state.seq;
  state.host.querySelectorAll(".exiting").forEach((el) => el.remove());
  const moveAll = state.animating; // an interrupted transition: send everything home
  const t = state.svg.transition("radixlens").duration(Math.max(1, durationMs));
  const byId = new Map(scene.nodes.map((n) => [n.id, n]));
  drawEdges(state, scene, byId, t, moveAll);
  drawNodes(state, scene, t, moveAll);
  state.scene = scene;
  const wasScroll = state.scroll;
  const fitView = fitBox(state, scene);
  state.fitView = fitView;
  sizeFor(state, scene, fitView);
  // level of detail (setView): at the fitted scale a 1,000-node tree's labels are sub-pixel,
  // and painting thousands of unreadable text runs is most of a frame's cost
  if (state.scroll || wasScroll) {
    state.zoomed = false; // a scrolling view is the scene at its legible scale: no zoom
    setView(state, fitView);
  } else if (state.zoomed) {
    setView(state, state.view);
  } else if (state.view) {
    const from = state.view;
    setView(state, fitView);
    state.svg.attr("viewBox", from.join(" ")).transition(t).attr("viewBox", fitView.join(" "));
  } else setView(state, fitView);
  state.animating = true;
  const host = state.host;
  host.dataset.animating = "1";
  host.dataset.nodes = String(host.querySelectorAll("g.node").length);
  host.dataset.drawMs = String(Math.round(performance.now() - started));
  host.dataset.renders = String(Number(host.dataset.renders || 0) + 1);
  t.end().catch(() => {}).then(() => {
    if (seq !== state.seq) return;
    state.animating = false;
    host.dataset.animating = "0";
    host.dataset.settleMs = String(Math.round(performance.now() - started));
    host.dataset.settled = String(Number(host.dataset.settled || 0) + 1);
  });
}

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  const state = stateFor(parentElement);
  state.callbacks.setTriggerValue = setTriggerValue;
  const scene = data && data.scene;
  if (!scene || data.sig === state.lastSig) return;
  state.lastSig = data.sig;
  if (data.height) state.host.style.height = `${data.height}px`;
  if (data.max_scale) state.maxScale = Number(data.max_scale);
  state.minFontPx = Number(data.min_font_px || 0);
  draw(state, scene, Number(data.duration_ms ?? 400));
}
