// RadixLens tree view: a Streamlit v2 component that renders DOT with d3-graphviz.
// Each call gets {dot, duration_ms, height}; the renderer persists per mount (keyed by the
// parent element), so a new DOT transitions from the last one: elements are matched by their
// DOT `id` (node n<id>, edge e<child id>), so unchanged nodes keep their place, a split edge
// morphs, new leaves grow in and evicted ones fade out. A click on a node sends its id back
// to Python as the trigger value `clicked`. The host div carries data-nodes, data-draw-ms and
// data-renders for tests (a state value would rerun the script on every draw).
import { graphviz } from "d3-graphviz";
import { transition } from "d3-transition";

const states = new WeakMap();

function stateFor(parentElement) {
  let state = states.get(parentElement);
  if (state) return state;
  const host = document.createElement("div");
  host.className = "radixlens-tree";
  parentElement.appendChild(host);
  state = { host, renderer: null, busy: false, pending: null, lastDot: null, callbacks: {} };
  host.addEventListener("click", (event) => {
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

function stamp(state, name) {
  state.host.dataset[name] = String(Math.round(performance.now() - state.started));
}

function draw(state, dot, durationMs) {
  if (state.busy) {
    state.pending = { dot, durationMs }; // only the newest DOT matters
    return;
  }
  state.busy = true;
  if (!state.renderer) {
    // subtle: the Graphviz WASM loads asynchronously; a transition made before "initEnd"
    // expires before it is used ("transition 1 not found"), so the first draw waits for it.
    state.renderer = graphviz(state.host, { useWorker: false })
      .keyMode("id")
      .fit(true)
      .zoom(false)
      .growEnteringEdges(true)
      .tweenShapes(false)
      .tweenPaths(false)
      .convertEqualSidedPolygons(false)
      .on("layoutEnd", () => stamp(state, "layoutMs"))
      .on("renderEnd", () => stamp(state, "renderMs"))
      .on("initEnd", () => {
        state.busy = false;
        draw(state, dot, durationMs);
      });
    return;
  }
  const started = performance.now();
  state.started = started;
  const finish = () => {
    if (!state.busy) return;
    state.busy = false;
    state.host.dataset.nodes = String(state.host.querySelectorAll("g.node").length);
    state.host.dataset.drawMs = String(Math.round(performance.now() - started));
    state.host.dataset.renders = String(Number(state.host.dataset.renders || 0) + 1);
    if (state.pending) {
      const next = state.pending;
      state.pending = null;
      draw(state, next.dot, next.durationMs);
    }
  };
  state.renderer
    // subtle: d3-graphviz resolves the transition from document.documentElement, so it must be
    // a root transition (d3.transition), and the component must not live in a shadow root.
    .transition(() => transition("radixlens-tree").duration(Math.max(1, durationMs)))
    .onerror((err) => {
      state.host.dataset.error = String(err);
      finish();
    })
    // the callback runs once the new elements are in place (the transition then plays on);
    // d3-graphviz queues a render that arrives while it is still busy.
    .renderDot(dot, finish);
}

export default function (component) {
  const { data, parentElement, setTriggerValue } = component;
  const state = stateFor(parentElement);
  state.callbacks.setTriggerValue = setTriggerValue;
  const dot = data && data.dot;
  if (!dot || dot === state.lastDot) return;
  state.lastDot = dot;
  if (data.height) state.host.style.height = `${data.height}px`;
  draw(state, dot, Number(data.duration_ms ?? 400));
}
