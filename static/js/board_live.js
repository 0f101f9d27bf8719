/* AutoCoder board: live updates.
 *
 * Opens ws(s)://<host>/ws/projects/<id>. When a task changes column or its run changes
 * phase or finishes (task-status, phase-change, pipeline-complete), the board partial
 * is fetched again through htmx — debounced, so a burst of events costs one request.
 * While a card is being dragged or the quick-add field holds text, the refresh waits.
 * A dropped socket reconnects (1 s, 2 s, then every 5 s).
 */
(function () {
  "use strict";

  var page = document.querySelector("[data-board-live]");
  if (!page || !("WebSocket" in window)) return;

  var BACKOFF_MS = [1000, 2000, 5000];
  var DEBOUNCE_MS = 300;
  var REFRESH_TYPES = { "task-status": 1, "phase-change": 1, "pipeline-complete": 1 };
  var FINAL_CLOSE_CODES = { 4401: 1, 4403: 1, 4404: 1 };

  var indicator = page.querySelector("[data-live-indicator]");
  var attempt = 0;
  var timer = null;
  var socket = null;
  var connectedBefore = false;

  function showState(state, text) {
    if (!indicator) return;
    indicator.hidden = false;
    indicator.setAttribute("data-state", state);
    var label = indicator.querySelector("[data-live-text]");
    if (label) label.textContent = text;
  }

  /** A card is being dragged, or someone is typing into the board's quick-add field. */
  function busy() {
    var board = document.querySelector("[data-board]");
    if (!board) return false;
    if (board.classList.contains("is-dragging")) return true;
    var active = document.activeElement;
    return Boolean(active && board.contains(active) && active.value);
  }

  function refresh() {
    clearTimeout(timer);
    timer = setTimeout(function () {
      var board = document.querySelector("[data-board]");
      if (!board || !window.htmx) return;
      if (busy()) { refresh(); return; } // try again once the card is dropped or the text sent
      window.htmx.ajax("GET", board.getAttribute("data-refresh-url"), { target: "#board", swap: "outerHTML" });
    }, DEBOUNCE_MS);
  }

  function connect() {
    var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
    try {
      socket = new WebSocket(scheme + "//" + window.location.host + page.getAttribute("data-ws-path"));
    } catch (error) {
      scheduleReconnect();
      return;
    }
    socket.onopen = function () {
      attempt = 0;
      showState("live", "Live");
      // Anything that happened while the socket was down is on the server: fetch it.
      if (connectedBefore) refresh();
      connectedBefore = true;
    };
    socket.onmessage = function (event) {
      var message;
      try {
        message = JSON.parse(event.data);
      } catch (error) {
        return;
      }
      if (message && REFRESH_TYPES[message.type]) refresh();
    };
    socket.onclose = function (event) {
      socket = null;
      if (FINAL_CLOSE_CODES[event.code]) {
        showState("offline", "Offline");
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

  connect();
})();
