/* AutoCoder chat page: send over the API, replies streamed over the websocket.
 *
 * Sends POST <api-url> (multipart: text, project, image) with the CSRF token.
 * Listens on ws(s)://<host>/ws/chat[?project=<id>]; messages are {type, data}:
 *   chat-chunk {message_id, chunk}  → appended to the streaming reply to message_id
 *   chat-message {message}          → the message is added or replaced (a finished reply
 *                                     replaces its streaming bubble)
 *   chat-queue {queue_size, processing} → the queue indicator
 *   ping                            → ignored
 * A dropped socket reconnects (AutoCoder.liveSocket, static/js/app.js) and reloads the
 * history, so nothing sent in between is missed. Without JavaScript the form posts to the page.
 */
(function () {
  "use strict";

  var root = document.querySelector("[data-chat]");
  if (!root) return;

  var list = root.querySelector("[data-chat-messages]");
  var form = root.querySelector("[data-chat-form]");
  var input = root.querySelector("[data-chat-input]");
  var imageInput = root.querySelector("[data-chat-image]");
  var imageName = root.querySelector("[data-chat-image-name]");
  var errorLine = root.querySelector("[data-chat-error]");
  var queue = root.querySelector("[data-chat-queue]");
  var live = root.querySelector("[data-chat-live]");
  var apiUrl = root.getAttribute("data-api-url");
  var project = root.getAttribute("data-project") || "";
  var maxBytes = Number(root.getAttribute("data-max-bytes")) || 0;

  function csrfToken() {
    var field = form.querySelector("input[name=csrfmiddlewaretoken]");
    return field ? field.value : "";
  }

  function scrollDown() { list.scrollTop = list.scrollHeight; }

  function dropEmpty() {
    var empty = list.querySelector("[data-chat-empty]");
    if (empty) empty.remove();
  }

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function render(m) {
    var li = el("li", "chat-msg chat-" + m.role + (m.status === "error" ? " chat-error" : ""));
    li.setAttribute("data-message-id", m.id);
    li.setAttribute("data-reply-to", m.reply_to || "");
    li.setAttribute("data-status", m.status);
    var bubble = el("div", "chat-bubble");
    bubble.appendChild(el("div", "chat-text", m.text));
    if (m.has_image) bubble.appendChild(el("div", "chat-meta", "Image attached"));
    if (m.role === "user" && (m.status === "queued" || m.status === "processing")) {
      var pending = el("div", "chat-meta", m.status === "queued" ? "Waiting in the queue…" : "Answering…");
      pending.setAttribute("data-pending", "");
      bubble.appendChild(pending);
    }
    li.appendChild(bubble);
    if (m.confirmations && m.confirmations.length) {
      var ul = el("ul", "chat-confirmations");
      m.confirmations.forEach(function (c) { ul.appendChild(el("li", "", c)); });
      li.appendChild(ul);
    }
    return li;
  }

  function upsert(m) {
    dropEmpty();
    var node = render(m);
    var existing = list.querySelector('[data-message-id="' + m.id + '"]');
    var streaming = m.reply_to ? list.querySelector('[data-streaming-for="' + m.reply_to + '"]') : null;
    if (existing) existing.replaceWith(node);
    else if (streaming) streaming.replaceWith(node);
    else list.appendChild(node);
    if (m.reply_to) {
      var question = list.querySelector('[data-message-id="' + m.reply_to + '"] [data-pending]');
      if (question) question.remove();
    }
    scrollDown();
  }

  function chunk(data) {
    dropEmpty();
    var node = list.querySelector('[data-streaming-for="' + data.message_id + '"]');
    if (!node) {
      node = el("li", "chat-msg chat-assistant chat-streaming");
      node.setAttribute("data-streaming-for", data.message_id);
      var bubble = el("div", "chat-bubble");
      bubble.appendChild(el("div", "chat-text", ""));
      node.appendChild(bubble);
      list.appendChild(node);
      var pending = list.querySelector('[data-message-id="' + data.message_id + '"] [data-pending]');
      if (pending) pending.textContent = "Answering…";
    }
    node.querySelector(".chat-text").textContent += data.chunk;
    scrollDown();
  }

  function showQueue(size, processing) {
    if (!queue) return;
    queue.setAttribute("data-processing", processing ? "true" : "false");
    queue.textContent = (processing ? "Answering · " : "") + size + " in the queue";
  }

  function showLive(text) {
    if (!live) return;
    live.hidden = !text;
    live.textContent = text;
  }

  function showError(text) {
    errorLine.hidden = !text;
    errorLine.textContent = text || "";
  }

  function reload() {
    var url = apiUrl + "?page_size=100" + (project ? "&project=" + encodeURIComponent(project) : "");
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (r) { return r.ok ? r.json() : null; })
      .then(function (body) {
        if (!body) return;
        list.textContent = "";
        body.results.forEach(upsert);
      })
      .catch(function () {});
  }

  var LIVE_TEXT = { live: "", reconnecting: "Reconnecting…", offline: "Live updates are off. Reload the page." };

  function receive(message) {
    var data = message.data || {};
    if (message.type === "chat-chunk") chunk(data);
    else if (message.type === "chat-message" && data.message) upsert(data.message);
    else if (message.type === "chat-queue") showQueue(data.queue_size, data.processing);
  }

  function send() {
    var text = input.value;
    if (!text.trim()) { showError("Write a message."); return; }
    var file = imageInput && imageInput.files[0];
    if (file && maxBytes && file.size > maxBytes) { showError("The image is larger than " + maxBytes + " bytes."); return; }
    var body = new FormData();
    body.append("text", text);
    if (project) body.append("project", project);
    if (file) body.append("image", file);
    showError("");
    fetch(apiUrl, {
      method: "POST",
      body: body,
      credentials: "same-origin",
      headers: { "X-CSRFToken": csrfToken(), Accept: "application/json" },
    })
      .then(function (r) { return r.json().then(function (json) { return { ok: r.ok, json: json }; }); })
      .then(function (res) {
        if (!res.ok) {
          var fields = (res.json.extra && res.json.extra.fields) || {};
          var first = Object.keys(fields)[0];
          showError(first ? fields[first][0] : res.json.message || "Could not send the message.");
          return;
        }
        upsert(res.json.message);
        input.value = "";
        if (imageInput) imageInput.value = "";
        if (imageName) imageName.textContent = "";
      })
      .catch(function () { showError("Could not reach the server. Try again."); });
  }

  form.addEventListener("submit", function (event) {
    event.preventDefault();
    send();
  });
  input.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      send();
    }
  });
  if (imageInput) {
    imageInput.addEventListener("change", function () {
      imageName.textContent = imageInput.files[0] ? imageInput.files[0].name : "";
    });
  }
  scrollDown();
  if (window.AutoCoder && window.AutoCoder.liveSocket) {
    window.AutoCoder.liveSocket(root.getAttribute("data-ws-path"), {
      onStatus: function (state) { showLive(LIVE_TEXT[state]); },
      onOpen: function (again) { if (again) reload(); },
      onMessage: receive,
    });
  }
})();
