/* AutoCoder chat page: send over the API, replies streamed over the websocket.
 *
 * Sends POST <api-url> (multipart: text, project, image) with the CSRF token.
 * Listens on ws(s)://<host>/ws/chat[?project=<id>]; messages are {type, data}:
 *   chat-chunk {message_id, chunk}  → appended to the streaming reply to message_id
 *   chat-message {message, html}    → the message's list item (html, rendered by the
 *                                     server with the page's own partial) is added or
 *                                     replaces its old one (a finished reply replaces its
 *                                     streaming bubble)
 *   chat-queue {queue_size, processing} → the queue indicator
 *   ping                            → ignored
 * Messages are never built here: their HTML comes from the server (the event, or
 * <messages-url> for the list and for a message just sent), so the page and the script
 * cannot show one differently. A dropped socket reconnects (AutoCoder.liveSocket,
 * static/js/app.js) and reloads the list, so nothing sent in between is missed. Without
 * JavaScript the form posts to the page.
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
  var messagesUrl = root.getAttribute("data-messages-url");
  var streamingTemplate = root.querySelector("[data-chat-streaming-template]");
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

  function messagesQuery(extra) {
    var params = new URLSearchParams(extra || {});
    if (project) params.set("project", project);
    return messagesUrl + "?" + params.toString();
  }

  function getHtml(url) {
    return fetch(url, { credentials: "same-origin", headers: { Accept: "text/html" } })
      .then(function (r) { return r.ok ? r.text() : null; });
  }

  /** The server's HTML of one message as an element (it holds one <li>). */
  function parseItem(html) {
    var holder = document.createElement("template");
    holder.innerHTML = html;
    return holder.content.querySelector("li[data-message-id]");
  }

  /** Add the message's list item, or replace its older one (or its streaming bubble). */
  function upsert(html) {
    var node = typeof html === "string" ? parseItem(html) : null;
    if (!node) return;
    dropEmpty();
    var id = node.getAttribute("data-message-id");
    var replyTo = node.getAttribute("data-reply-to");
    var existing = list.querySelector('[data-message-id="' + id + '"]');
    var streaming = replyTo ? list.querySelector('[data-streaming-for="' + replyTo + '"]') : null;
    if (existing) existing.replaceWith(node);
    else if (streaming) streaming.replaceWith(node);
    else list.appendChild(node);
    if (replyTo) {
      var question = list.querySelector('[data-message-id="' + replyTo + '"] [data-pending]');
      if (question) question.remove();
    }
    scrollDown();
  }

  /** A message just sent: shown at once unless its event already showed it. */
  function showSent(id) {
    if (list.querySelector('[data-message-id="' + id + '"]')) return;
    getHtml(messagesQuery({ id: id }))
      .then(function (html) {
        if (html && !list.querySelector('[data-message-id="' + id + '"]')) upsert(html);
      })
      .catch(function () {});
  }

  function chunk(data) {
    dropEmpty();
    var node = list.querySelector('[data-streaming-for="' + data.message_id + '"]');
    if (!node) {
      node = streamingTemplate.content.firstElementChild.cloneNode(true);
      node.setAttribute("data-streaming-for", data.message_id);
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
    getHtml(messagesQuery())
      .then(function (html) {
        if (html === null) return;
        list.innerHTML = html; // the server's rendering of the list (the page's own partial)
        scrollDown();
      })
      .catch(function () {});
  }

  var LIVE_TEXT = { live: "", reconnecting: "Reconnecting…", offline: "Live updates are off. Reload the page." };

  function receive(message) {
    var data = message.data || {};
    if (message.type === "chat-chunk") chunk(data);
    else if (message.type === "chat-message") upsert(data.html);
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
        showSent(res.json.message.id);
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
