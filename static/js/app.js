/* AutoCoder: small page behaviours shared by every page. Pages work without it. */
(function () {
  "use strict";

  var TOAST_MS = { success: 5000, info: 5000, warning: 8000, error: 9000 };

  function dismiss(toast) {
    if (!toast || toast.classList.contains("is-leaving")) return;
    toast.classList.add("is-leaving");
    setTimeout(function () { toast.remove(); }, 200);
  }

  function schedule(toast, kind) {
    setTimeout(function () { dismiss(toast); }, TOAST_MS[kind] || 6000);
  }

  /** Show a message in the corner. kind: "success" | "info" | "warning" | "error". */
  function toast(message, kind) {
    kind = kind || "info";
    var box = document.getElementById("toasts");
    if (!box) return;
    var el = document.createElement("div");
    el.className = "toast toast-" + kind;
    el.setAttribute("role", kind === "error" ? "alert" : "status");
    el.setAttribute("data-toast", "");
    var icon = document.createElement("span");
    icon.className = "toast-icon";
    icon.setAttribute("aria-hidden", "true");
    var text = document.createElement("p");
    text.className = "toast-text";
    text.textContent = message;
    var close = document.createElement("button");
    close.type = "button";
    close.className = "toast-close";
    close.setAttribute("data-toast-close", "");
    close.setAttribute("aria-label", "Dismiss");
    close.textContent = "×";
    el.append(icon, text, close);
    box.append(el);
    schedule(el, kind);
  }

  // --- Live sockets --------------------------------------------------------------------

  // 4401 signed out, 4403 refused, 4404 not found or not yours (core/consumers.py):
  // reconnecting cannot help.
  var FINAL_CLOSE_CODES = { 4401: 1, 4403: 1, 4404: 1 };
  var BACKOFF_MS = [1000, 2000, 5000];

  /**
   * A websocket to this site that comes back by itself: after a drop it reconnects in
   * 1 s, 2 s, then every 5 s, and at once when the page comes back from the browser's
   * page cache. Returns null where the browser has no WebSocket.
   *   path                  "/ws/…", or a function that returns it (asked at each connect)
   *   options.onMessage(m)  each message, parsed: an object with a string type; the
   *                         server's keepalive pings and unreadable frames are dropped
   *   options.onOpen(again) connected; again is true after a drop (time to catch up)
   *   options.onStatus(state, closeEvent)
   *                         "live", "reconnecting", or "offline" after a final close
   * The result has send(data) (false while not connected) and close() (for good).
   */
  function liveSocket(path, options) {
    if (!("WebSocket" in window)) return null;
    options = options || {};
    var socket = null;
    var timer = null;
    var attempt = 0;
    var openedBefore = false;
    var stopped = false;

    function status(state, event) {
      if (options.onStatus) options.onStatus(state, event);
    }

    function url() {
      var scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
      return scheme + "//" + window.location.host + (typeof path === "function" ? path() : path);
    }

    function connect() {
      timer = null;
      if (stopped || socket) return;
      try {
        socket = new WebSocket(url());
      } catch (error) {
        socket = null;
        retry();
        return;
      }
      socket.onopen = function () {
        attempt = 0;
        status("live");
        var again = openedBefore;
        openedBefore = true;
        if (options.onOpen) options.onOpen(again);
      };
      socket.onmessage = function (event) {
        var message;
        try {
          message = JSON.parse(event.data);
        } catch (error) {
          return;
        }
        if (!message || typeof message.type !== "string" || message.type === "ping") return;
        if (options.onMessage) options.onMessage(message);
      };
      socket.onclose = function (event) {
        socket = null;
        if (stopped) return;
        if (FINAL_CLOSE_CODES[event.code]) {
          status("offline", event);
          return;
        }
        retry();
      };
    }

    function retry() {
      status("reconnecting");
      var delay = BACKOFF_MS[Math.min(attempt, BACKOFF_MS.length - 1)];
      attempt += 1;
      timer = setTimeout(connect, delay);
    }

    // Back from the browser's page cache: the socket was closed meanwhile.
    window.addEventListener("pageshow", function (event) {
      if (event.persisted && !socket && !timer) connect();
    });

    connect();
    return {
      send: function (data) {
        if (!socket || socket.readyState !== WebSocket.OPEN) return false;
        socket.send(typeof data === "string" ? data : JSON.stringify(data));
        return true;
      },
      close: function () {
        stopped = true;
        clearTimeout(timer);
        timer = null;
        if (socket) socket.close();
      },
    };
  }

  /** A liveSocket onStatus that shows the state in a [data-live-indicator] badge. */
  function liveIndicator(indicator) {
    return function (state, event) {
      if (!indicator) return;
      var text = state === "live" ? "Live"
        : state === "reconnecting" ? "Reconnecting…"
        : event && event.code === 4401 ? "Signed out" : "Offline";
      indicator.hidden = false;
      indicator.setAttribute("data-state", state);
      var label = indicator.querySelector("[data-live-text]");
      if (label) label.textContent = text;
      indicator.title = state === "live" ? "Live updates are on" : text;
    };
  }

  window.AutoCoder = window.AutoCoder || {};
  window.AutoCoder.toast = toast;
  window.AutoCoder.liveSocket = liveSocket;
  window.AutoCoder.liveIndicator = liveIndicator;

  document.addEventListener("DOMContentLoaded", function () {
    // Flash messages rendered by the server fade out like the others.
    document.querySelectorAll("[data-toast]").forEach(function (el) {
      var kind = (el.className.match(/toast-(\w+)/) || [])[1];
      schedule(el, kind);
    });
  });

  // Messages that arrive with an htmx answer (out-of-band into #toasts) fade out too.
  document.addEventListener("htmx:load", function (event) {
    var el = event.target;
    if (el && el.matches && el.matches("[data-toast]")) {
      var kind = (el.className.match(/toast-(\w+)/) || [])[1];
      schedule(el, kind);
    }
  });

  document.addEventListener("click", function (event) {
    var target = event.target;

    var close = target.closest("[data-toast-close]");
    if (close) { dismiss(close.closest("[data-toast]")); return; }

    // Links that open a <dialog> when JavaScript runs (they are plain links otherwise).
    var opener = target.closest("[data-dialog-open]");
    if (opener) {
      var dialog = document.getElementById(opener.getAttribute("data-dialog-open"));
      if (dialog && typeof dialog.showModal === "function") {
        event.preventDefault();
        dialog.showModal();
        var first = dialog.querySelector("input:not([type=hidden]), textarea, select");
        if (first) first.focus();
      }
      return;
    }
    // Buttons that put a value in a field of their form (a suggestion to accept or edit):
    // <button type="button" data-fill-field="name" data-fill-value="…">.
    var filler = target.closest("[data-fill-field]");
    if (filler && filler.form) {
      var field = filler.form.elements.namedItem(filler.getAttribute("data-fill-field"));
      if (field && "value" in field) {
        field.value = filler.getAttribute("data-fill-value");
        field.focus();
      }
      return;
    }
    var closer = target.closest("[data-dialog-close]");
    if (closer) { closer.closest("dialog").close(); return; }
    if (target.tagName === "DIALOG") { target.close(); return; } // click on the backdrop

    // Close open dropdowns when clicking elsewhere.
    document.querySelectorAll("details[data-dropdown][open]").forEach(function (menu) {
      if (!menu.contains(target)) menu.removeAttribute("open");
    });
  });

  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    document.querySelectorAll("details[data-dropdown][open]").forEach(function (menu) {
      menu.removeAttribute("open");
      var summary = menu.querySelector("summary");
      if (summary) summary.focus();
    });
  });

  // The Content-Security-Policy refuses inline handlers (onsubmit="", onchange="") and
  // style="" attributes: templates say what they want with data attributes instead.

  // Plain forms that ask before they are sent: <form data-confirm="Really?">.
  document.addEventListener("submit", function (event) {
    var form = event.target;
    if (!form.matches || !form.matches("form[data-confirm]")) return;
    if (!window.confirm(form.getAttribute("data-confirm"))) {
      event.preventDefault();
      event.stopPropagation();
    }
  }, true);

  // Selects that send their form when changed: <select data-autosubmit>.
  document.addEventListener("change", function (event) {
    var el = event.target;
    if (el.matches && el.matches("select[data-autosubmit]") && el.form) el.form.submit();
  });

  // Bar widths (data-width="42", a percentage) and nesting depths (data-depth="2").
  function applyDataStyles(root) {
    if (!root || !root.querySelectorAll) return;
    var all = Array.prototype.slice.call(root.querySelectorAll("[data-width], [data-depth]"));
    if (root.matches && root.matches("[data-width], [data-depth]")) all.push(root);
    all.forEach(function (el) {
      var width = parseFloat(el.getAttribute("data-width"));
      if (!isNaN(width)) el.style.width = Math.min(Math.max(width, 0), 100) + "%";
      var depth = parseInt(el.getAttribute("data-depth"), 10);
      if (!isNaN(depth)) el.style.setProperty("--depth", String(depth));
    });
  }
  document.addEventListener("DOMContentLoaded", function () { applyDataStyles(document); });
  document.addEventListener("htmx:load", function (event) { applyDataStyles(event.target); });

  // Only one dropdown open at a time.
  document.addEventListener("toggle", function (event) {
    var opened = event.target;
    if (!opened.matches || !opened.matches("details[data-dropdown]") || !opened.open) return;
    document.querySelectorAll("details[data-dropdown][open]").forEach(function (menu) {
      if (menu !== opened) menu.removeAttribute("open");
    });
  }, true);
})();
