/* AutoCoder task page: the pipeline, live.
 *
 * Opens ws(s)://<host>/ws/tasks/<id>?last_event_id=<N>, N being the newest event the
 * server had already rendered into the page, so the socket replays only what is newer.
 * Messages are {id, type, data}:
 *   agent-log {agent, chunk}  → appended to that agent's log pane
 *   phase-change, run-update, error, pipeline-complete, task-status
 *                             → the run panel is fetched again (htmx); the log panes are
 *                               outside it and keep their text
 *   ping                      → ignored
 * A dropped socket reconnects (1 s, 2 s, then every 5 s) from the last id seen.
 * Without JavaScript the page still shows everything persisted so far.
 */
(function () {
  "use strict";

  var root = document.querySelector("[data-task-live]");
  if (!root || !("WebSocket" in window)) return;

  var BACKOFF_MS = [1000, 2000, 5000];
  var REFRESH_DEBOUNCE_MS = 150;
  var REFRESH_TYPES = { "phase-change": 1, "run-update": 1, error: 1, "pipeline-complete": 1, "task-status": 1 };
  var AGENT_FOR_STATUS = { planning: "planner", coding: "coder", fixing: "coder", verifying: "verifier", reviewing: "reviewer" };
  // 4401 not logged in, 4404 not found or not yours: reconnecting cannot help.
  var FINAL_CLOSE_CODES = { 4401: 1, 4403: 1, 4404: 1 };

  var lastId = Number(root.getAttribute("data-last-event-id")) || 0;
  var panelUrl = root.getAttribute("data-panel-url");
  var indicator = root.querySelector("[data-live-indicator]");
  var socket = null;
  var attempt = 0;
  var refreshTimer = null;
  var currentRunNumber = "";
  // The phase the next log chunks belong to: the id of the phase-change that began it.
  var phaseKey = Number(root.getAttribute("data-phase-event-id")) || 0;
  var phaseText = root.getAttribute("data-phase-label") || "";
  var PHASE_LABELS = { planning: "Planning", coding: "Coding", reviewing: "Reviewing", fixing: "Fixing" };

  function panel() { return document.getElementById("pipeline-panel"); }
  function logs() { return root.querySelector("[data-agent-logs]"); }

  function readPanel() {
    var el = panel();
    if (!el) return;
    var runId = el.getAttribute("data-run-id") || "";
    if (runId) currentRunNumber = el.getAttribute("data-run-number") || "";
    if (runId && logs()) logs().hidden = false;
    var status = el.getAttribute("data-run-status") || "";
    var stopped = status === "paused" || status === "failed" ? status : "";
    setActiveAgent(AGENT_FOR_STATUS[status] || "", el.getAttribute("data-focus-agent") || "", stopped);
  }

  // --- Status indicator ----------------------------------------------------------------

  function showState(state, text) {
    if (!indicator) return;
    indicator.hidden = false;
    indicator.setAttribute("data-state", state);
    var label = indicator.querySelector("[data-live-text]");
    if (label) label.textContent = text;
    indicator.title = state === "live" ? "Live updates are on" : text;
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

  function phaseLabel(status, iteration) {
    iteration = Number(iteration) || 0;
    var label = PHASE_LABELS[status] || status;
    if (status === "reviewing") label = "Review " + (iteration + 1);
    if (status === "fixing") label = "Fixing after review " + iteration;
    return Number(currentRunNumber) > 1 ? "Run " + currentRunNumber + " · " + label : label;
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

  function refreshPanel() {
    clearTimeout(refreshTimer);
    refreshTimer = setTimeout(function () {
      if (!window.htmx || !panel()) return;
      // Someone typing feedback keeps their text: the textarea is hx-preserve'd.
      window.htmx.ajax("GET", panelUrl, { target: "#pipeline-panel", swap: "outerHTML" });
    }, REFRESH_DEBOUNCE_MS);
  }

  function handle(message) {
    var data = message.data || {};
    switch (message.type) {
      case "ping":
        return;
      case "agent-log":
        appendLog(data.agent, data.chunk);
        return;
      case "phase-change":
        if (AGENT_FOR_STATUS[data.status]) {
          phaseKey = Number(message.id) || phaseKey + 1;
          phaseText = phaseLabel(data.status, data.iteration);
        }
        setActiveAgent(AGENT_FOR_STATUS[data.status] || "");
        if (logs()) logs().hidden = false;
        refreshPanel();
        return;
      default:
        if (REFRESH_TYPES[message.type]) refreshPanel();
    }
  }

  // --- Socket --------------------------------------------------------------------------

  function socketUrl() {
    var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    return scheme + "//" + window.location.host + root.getAttribute("data-ws-path") + "?last_event_id=" + lastId;
  }

  function connect() {
    try {
      socket = new WebSocket(socketUrl());
    } catch (error) {
      scheduleReconnect();
      return;
    }
    socket.onopen = function () {
      attempt = 0;
      showState("live", "Live");
    };
    socket.onmessage = function (event) {
      var message;
      try {
        message = JSON.parse(event.data);
      } catch (error) {
        return;
      }
      if (!message || typeof message.type !== "string") return;
      var id = Number(message.id) || 0;
      if (id) {
        if (id <= lastId) return; // already shown (a replay after a reconnect)
        lastId = id;
      }
      handle(message);
    };
    socket.onclose = function (event) {
      socket = null;
      if (FINAL_CLOSE_CODES[event.code]) {
        showState("offline", event.code === 4401 ? "Signed out" : "Offline");
        return;
      }
      scheduleReconnect();
    };
  }

  function scheduleReconnect() {
    showState("reconnecting", "Reconnecting…");
    var delay = BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)];
    attempt += 1;
    setTimeout(connect, delay);
  }

  root.addEventListener("click", function (event) {
    var summary = event.target.closest && event.target.closest("[data-log-pane] > summary");
    if (summary) summary.parentElement.setAttribute("data-user-toggled", "");
  });

  // After any swap (a refresh, or an action's answer) the panel says which run is current.
  document.addEventListener("htmx:afterSettle", readPanel);

  // Back from the browser's page cache: the socket was closed meanwhile.
  window.addEventListener("pageshow", function (event) {
    if (event.persisted && !socket) connect();
  });

  readPanel();
  root.querySelectorAll("[data-log-body]").forEach(function (body) { body.scrollTop = body.scrollHeight; });
  connect();
})();
