/* AutoCoder board: live updates.
 *
 * Opens ws(s)://<host>/ws/projects/<id>. When a task changes column (task-status) the
 * board partial is fetched again through htmx — debounced, so a burst of events costs
 * one request. When a task's run changes phase, spends (each agent call) or finishes
 * (phase-change, run-update, pipeline-complete, pull-request; their data name the task), only that
 * card is fetched again (its data-card-url), debounced per card: its run chip and cost.
 * While a card is being dragged or the quick-add field holds text, the refresh waits.
 * A dropped socket reconnects (AutoCoder.liveSocket, static/js/app.js).
 */
(function () {
  "use strict";

  var page = document.querySelector("[data-board-live]");
  if (!page || !window.AutoCoder || !window.AutoCoder.liveSocket) return;

  var DEBOUNCE_MS = 300;
  var BOARD_TYPES = { "task-status": 1 };
  var CARD_TYPES = { "phase-change": 1, "run-update": 1, "pipeline-complete": 1, "pull-request": 1 };
  var timer = null;
  var cardTimers = {};

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

  function refreshCard(taskId) {
    var key = String(taskId);
    clearTimeout(cardTimers[key]);
    cardTimers[key] = setTimeout(function () {
      delete cardTimers[key];
      var board = document.querySelector("[data-board]");
      // A card the board does not show (filtered out, past "Show more") has nothing to update.
      var card = board && board.querySelector('[data-task-id="' + key.replace(/[^0-9]/g, "") + '"]');
      if (!card || !window.htmx) return;
      if (busy()) { refreshCard(key); return; }
      window.htmx.ajax("GET", card.getAttribute("data-card-url"), { target: card, swap: "outerHTML" });
    }, DEBOUNCE_MS);
  }

  window.AutoCoder.liveSocket(page.getAttribute("data-ws-path"), {
    onStatus: window.AutoCoder.liveIndicator(page.querySelector("[data-live-indicator]")),
    // Anything that happened while the socket was down is on the server: fetch it.
    onOpen: function (again) { if (again) refresh(); },
    onMessage: function (message) {
      if (BOARD_TYPES[message.type]) refresh();
      else if (CARD_TYPES[message.type] && message.data && message.data.task_id) refreshCard(message.data.task_id);
    },
  });
})();
