/* AutoCoder task page: the pipeline, live.
 *
 * Opens ws(s)://<host>/ws/tasks/<id>?last_event_id=<N>, N being the newest event the
 * server had already rendered into the page, so the socket replays only what is newer.
 * Messages are {id, type, data}:
 *   agent-log {agent, chunk}  → appended to that agent's log pane
 *   phase-change {label, agent, …}
 *                             → later chunks go under the server's label; the agent's
 *                               pane is the live one (no phase table here: the server's
 *                               pipelines/runs/selectors.py is the one source)
 *   phase-change, run-update, subtask-change, error, pipeline-complete, task-status
 *                             → the run panel is fetched again (htmx); the log panes are
 *                               outside it and keep their text
 *   ping                      → ignored
 * A dropped socket reconnects (AutoCoder.liveSocket, static/js/app.js) from the last
 * id seen.
 * Without JavaScript the page still shows everything persisted so far.
 */
(function () {
  "use strict";

  var root = document.querySelector("[data-task-live]");
  if (!root || !("WebSocket" in window) || !window.AutoCoder || !window.AutoCoder.liveSocket) return;

  var REFRESH_DEBOUNCE_MS = 150;
  var REFRESH_TYPES = {
    "phase-change": 1, "run-update": 1, "subtask-change": 1, error: 1, "pipeline-complete": 1, "task-status": 1
  };
  // A person's message to the run sent or read: the panel shows which (pipelines/messages/).
  REFRESH_TYPES["run-message"] = 1;

  var lastId = Number(root.getAttribute("data-last-event-id")) || 0;
  var panelUrl = root.getAttribute("data-panel-url");
  var refreshTimer = null;
  // The phase the next log chunks belong to: the id of the phase-change that began it.
  var phaseKey = Number(root.getAttribute("data-phase-event-id")) || 0;
  var phaseText = root.getAttribute("data-phase-label") || "";

  function panel() { return document.getElementById("pipeline-panel"); }
  function logs() { return root.querySelector("[data-agent-logs]"); }

  function readPanel() {
    var el = panel();
    if (!el) return;
    if (el.getAttribute("data-run-id") && logs()) logs().hidden = false;
    var status = el.getAttribute("data-run-status") || "";
    var stopped = status === "paused" || status === "failed" ? status : "";
    setActiveAgent(el.getAttribute("data-active-agent") || "", el.getAttribute("data-focus-agent") || "", stopped);
  }

  // --- Log panes -----------------------------------------------------------------------

  /** Mark the working agent's pane (and the one a paused or failed run stopped in). */
  function setActiveAgent(agent, stoppedAgent, stoppedState) {
    root.querySelectorAll("[data-log-pane]").forEach(function (pane) {
      var name = pane.getAttribute("data-log-pane");
      var active = name === agent;
      pane.classList.toggle("is-active", active);
      // The working agent's pane opens and the others fold, unless the person opened
      // or closed one themselves.
      if (agent && !pane.hasAttribute("data-user-toggled")) pane.open = active;
      var state = pane.querySelector("[data-log-state]");
      if (!state) return;
      var value = active ? "streaming"
        : name === stoppedAgent && stoppedState ? stoppedState
        : pane.classList.contains("is-empty") ? "waiting" : "done";
      state.setAttribute("data-state", value);
      state.textContent = value.charAt(0).toUpperCase() + value.slice(1);
    });
  }

  function isAtBottom(el) {
    return el.scrollHeight - el.scrollTop - el.clientHeight < 24;
  }

  function appendLog(agent, chunk) {
    if (typeof agent !== "string" || !/^[a-z_-]+$/.test(agent) || typeof chunk !== "string" || !chunk) return;
    var pane = root.querySelector('[data-log-pane="' + agent + '"]');
    if (!pane) return;
    var body = pane.querySelector("[data-log-body]");
    var follow = isAtBottom(body);
    var segments = body.querySelectorAll(".log-segment");
    var segment = segments.length ? segments[segments.length - 1] : null;
    if (!segment || segment.getAttribute("data-phase") !== String(phaseKey)) {
      // A new phase (or run) writes below the previous output, under its own label.
      var label = document.createElement("b");
      label.className = "log-run";
      label.textContent = phaseText || "Output";
      segment = document.createElement("span");
      segment.className = "log-segment";
      segment.setAttribute("data-phase", String(phaseKey));
      body.append(label, segment);
    }
    segment.appendChild(document.createTextNode(chunk));
    if (pane.classList.contains("is-empty")) {
      pane.classList.remove("is-empty");
      if (logs()) logs().hidden = false;
      if (!pane.hasAttribute("data-user-toggled")) pane.open = true;
    }
    if (follow) body.scrollTop = body.scrollHeight;
  }

  // --- Panel refresh -------------------------------------------------------------------

  // One refresh at a time, and one more after it when events came in meanwhile: htmx
  // would queue that one with the target it resolved when asked — the panel the running
  // refresh replaces — so it would land in a detached element and the panel would stay
  // behind (e.g. on "Testing" while the run already awaits approval).
  var refreshing = false;
  var refreshAgain = false;

  function refreshPanel() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(function () {
      if (!window.htmx || !panel()) return;
      if (refreshing) {
        refreshAgain = true;
        return;
      }
      refreshing = true;
      // Someone typing feedback keeps their text: the textarea is hx-preserve'd.
      window.htmx.ajax("GET", panelUrl, { target: "#pipeline-panel", swap: "outerHTML" }).then(refreshed, refreshed);
    }, REFRESH_DEBOUNCE_MS);
  }

  function refreshed() {
    refreshing = false;
    if (refreshAgain) {
      refreshAgain = false;
      refreshPanel();
    }
  }

  function handle(message) {
    var data = message.data || {};
    switch (message.type) {
      case "agent-log":
        appendLog(data.agent, data.chunk);
        return;
      case "phase-change":
        // A phase with an agent begins a new segment of that agent's output.
        if (data.agent) {
          phaseKey = Number(message.id) || phaseKey + 1;
          phaseText = typeof data.label === "string" ? data.label : "";
        }
        setActiveAgent(typeof data.agent === "string" ? data.agent : "");
        if (logs()) logs().hidden = false;
        refreshPanel();
        return;
      default:
        if (REFRESH_TYPES[message.type]) refreshPanel();
        // The pipeline moved the card: the Activity list fetches itself again
        // (templates/tasks/_activity.html).
        if (message.type === "task-status") document.body.dispatchEvent(new CustomEvent("autocoder:task-status"));
    }
  }

  // --- Socket --------------------------------------------------------------------------

  function receive(message) {
    var id = Number(message.id) || 0;
    if (id) {
      if (id <= lastId) return; // already shown (a replay after a reconnect)
      lastId = id;
    }
    handle(message);
  }

  root.addEventListener("click", function (event) {
    var summary = event.target.closest && event.target.closest("[data-log-pane] > summary");
    if (summary) summary.parentElement.setAttribute("data-user-toggled", "");
  });

  // After any swap (a refresh, or an action's answer) the panel says which run is current.
  document.addEventListener("htmx:afterSettle", readPanel);

  readPanel();
  root.querySelectorAll("[data-log-body]").forEach(function (body) { body.scrollTop = body.scrollHeight; });
  window.AutoCoder.liveSocket(
    function () { return root.getAttribute("data-ws-path") + "?last_event_id=" + lastId; },
    { onStatus: window.AutoCoder.liveIndicator(root.querySelector("[data-live-indicator]")), onMessage: receive }
  );
})();
