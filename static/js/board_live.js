/* AutoCoder board: live updates.
 *
 * Opens ws(s)://<host>/ws/projects/<id>. When a task changes column or its run changes
 * phase or finishes (task-status, phase-change, pipeline-complete), the board partial
 * is fetched again through htmx — debounced, so a burst of events costs one request.
 * While a card is being dragged or the quick-add field holds text, the refresh waits.
 * A dropped socket reconnects (AutoCoder.liveSocket, static/js/app.js).
 */
(function () {
  "use strict";

  var page = document.querySelector("[data-board-live]");
  if (!page || !window.AutoCoder || !window.AutoCoder.liveSocket) return;

  var DEBOUNCE_MS = 300;
  var REFRESH_TYPES = { "task-status": 1, "phase-change": 1, "pipeline-complete": 1 };
  var timer = null;

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

  window.AutoCoder.liveSocket(page.getAttribute("data-ws-path"), {
    onStatus: window.AutoCoder.liveIndicator(page.querySelector("[data-live-indicator]")),
    // Anything that happened while the socket was down is on the server: fetch it.
    onOpen: function (again) { if (again) refresh(); },
    onMessage: function (message) { if (REFRESH_TYPES[message.type]) refresh(); },
  });
})();
