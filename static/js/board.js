/* AutoCoder board: drag cards between and within columns (native HTML5 drag and drop).
 *
 * A drop is sent to PATCH /api/tasks/{id}/status as {status, position}; position is the
 * card's index in the target column. The server decides: a refused move (400,
 * code "invalid_transition") puts the card back where it was and shows the message.
 * Without JavaScript, the task page has a "Move to…" form that does the same.
 */
(function () {
  "use strict";

  var drag = null; // {card, list, next, status, position}
  var table = null;

  function transitions() {
    if (table === null) {
      var el = document.getElementById("transition-table");
      table = el ? JSON.parse(el.textContent) : {};
    }
    return table;
  }

  function csrfToken() {
    var match = document.cookie.match(/(?:^|;\s*)csrftoken=([^;]+)/);
    if (match) return decodeURIComponent(match[1]);
    var input = document.querySelector("input[name=csrfmiddlewaretoken]");
    return input ? input.value : "";
  }

  function toast(message, kind) {
    if (window.AutoCoder && window.AutoCoder.toast) window.AutoCoder.toast(message, kind);
    else window.alert(message);
  }

  function board() { return document.querySelector("[data-board]"); }
  function cardsIn(list) { return Array.prototype.slice.call(list.querySelectorAll("[data-task-id]")); }
  function columns() { return Array.prototype.slice.call(document.querySelectorAll("[data-column]")); }

  function updateCounts() {
    columns().forEach(function (column) {
      // A capped column holds more tasks than it renders: its "Show more" says how many.
      var more = column.querySelector("[data-more-count]");
      var n = column.querySelectorAll("[data-task-id]").length + (more ? Number(more.getAttribute("data-more-count")) || 0 : 0);
      var count = column.querySelector("[data-count]");
      if (!count) return;
      count.textContent = String(n);
      count.setAttribute("aria-label", n + (n === 1 ? " task" : " tasks"));
    });
  }

  function clearMarks() {
    var b = board();
    if (b) b.classList.remove("is-dragging");
    columns().forEach(function (column) { column.classList.remove("is-allowed", "is-blocked", "is-over"); });
  }

  function restore(state) {
    if (state.next && state.next.parentNode === state.list) state.list.insertBefore(state.card, state.next);
    else state.list.appendChild(state.card);
    state.card.classList.remove("is-dragging", "is-saving");
    updateCounts();
  }

  /** The card the dragged one should go before, from the pointer's height. */
  function cardBelow(list, y) {
    var best = null;
    var bestOffset = -Infinity;
    cardsIn(list).forEach(function (card) {
      if (card === drag.card) return;
      var box = card.getBoundingClientRect();
      var offset = y - box.top - box.height / 2;
      if (offset < 0 && offset > bestOffset) { bestOffset = offset; best = card; }
    });
    return best;
  }

  /** Index in the whole target column. When the board is filtered some cards are
   * hidden, so the index comes from the neighbours' stored positions instead. */
  function targetPosition(list, state) {
    var cards = cardsIn(list);
    var index = cards.indexOf(state.card);
    var b = board();
    if (!b || b.getAttribute("data-filtered") !== "true") return index;
    var position;
    if (cards[index + 1]) position = Number(cards[index + 1].getAttribute("data-position"));
    else if (cards[index - 1]) position = Number(cards[index - 1].getAttribute("data-position")) + 1;
    else return 0;
    if (list === state.list && state.position < position) position -= 1;
    return Math.max(0, position);
  }

  function refreshBoard() {
    var b = board();
    if (b && window.htmx) {
      window.htmx.ajax("GET", b.getAttribute("data-refresh-url"), { target: "#board", swap: "outerHTML" });
    }
  }

  function failureMessage(body, status) {
    if (body && typeof body.message === "string" && body.message) return body.message;
    if (status === 401 || status === 403) return "Your session has expired. Reload the page and log in again.";
    if (status === 404) return "This task no longer exists. Reload the page.";
    return "The move could not be saved. The card was put back.";
  }

  function commit(state, column) {
    var card = state.card;
    var list = column.querySelector("[data-dropzone]");
    if (list === state.list && card.nextElementSibling === state.next) { // dropped where it was
      card.classList.remove("is-dragging");
      return;
    }
    var status = column.getAttribute("data-status");
    var position = targetPosition(list, state);
    card.classList.remove("is-dragging");
    card.classList.add("is-saving");
    updateCounts();

    fetch("/api/tasks/" + encodeURIComponent(card.getAttribute("data-task-id")) + "/status", {
      method: "PATCH",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", Accept: "application/json", "X-CSRFToken": csrfToken() },
      body: JSON.stringify({ status: status, position: position }),
    })
      .then(function (response) {
        if (response.ok) {
          card.setAttribute("data-status", status);
          card.classList.remove("is-saving");
          refreshBoard(); // positions of the other cards changed too
          return;
        }
        return response.json().catch(function () { return null; }).then(function (body) {
          restore(state);
          toast(failureMessage(body, response.status), "error");
        });
      })
      .catch(function () {
        restore(state);
        toast("Could not reach the server. The card was put back.", "error");
      });
  }

  document.addEventListener("dragstart", function (event) {
    var card = event.target.closest && event.target.closest("[data-task-id]");
    if (!card || !card.closest("[data-board]")) return;
    var status = card.getAttribute("data-status");
    drag = {
      card: card,
      list: card.parentElement,
      next: card.nextElementSibling,
      status: status,
      position: Number(card.getAttribute("data-position")),
    };
    event.dataTransfer.effectAllowed = "move";
    event.dataTransfer.setData("text/plain", card.getAttribute("data-task-id"));
    var allowed = transitions()[status] || [];
    board().classList.add("is-dragging");
    columns().forEach(function (column) {
      var target = column.getAttribute("data-status");
      var ok = target === status || allowed.indexOf(target) !== -1;
      column.classList.toggle("is-allowed", ok);
      column.classList.toggle("is-blocked", !ok);
    });
    // Let the browser take its drag image before the card is dimmed.
    window.requestAnimationFrame(function () { card.classList.add("is-dragging"); });
  });

  document.addEventListener("dragover", function (event) {
    if (!drag) return;
    var column = event.target.closest && event.target.closest("[data-column]");
    if (!column) return;
    event.preventDefault(); // every column accepts the drop: the server explains a refusal
    event.dataTransfer.dropEffect = "move";
    columns().forEach(function (other) { other.classList.toggle("is-over", other === column); });
    var list = column.querySelector("[data-dropzone]");
    var before = cardBelow(list, event.clientY);
    if (drag.card.parentElement !== list || drag.card.nextElementSibling !== before) {
      list.insertBefore(drag.card, before);
    }
  });

  document.addEventListener("drop", function (event) {
    if (!drag) return;
    var column = event.target.closest && event.target.closest("[data-column]");
    if (!column) return;
    event.preventDefault();
    var state = drag;
    drag = null;
    clearMarks();
    commit(state, column);
  });

  document.addEventListener("dragend", function () {
    if (drag) { // dropped outside the board, or Escape
      restore(drag);
      drag = null;
    }
    clearMarks();
  });

  // Never swap the board under a card that is being dragged.
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (drag && event.detail.target && event.detail.target.id === "board") event.detail.shouldSwap = false;
  });
})();
