/* AutoCoder task page: comments on lines of a run's diff.
 *
 * The "+" beside a new-file line number (or a removed line's old number) opens the
 * diff's one comment form (<template id="line-comment-form-template">) under that line;
 * shift-click on another line of the same file and side makes a range and moves the
 * form under its last line. The form
 * posts through htmx (the panel and the diff come back with the comment in place).
 * Listeners sit on the document: htmx replaces the diff after every action.
 */
(function () {
  "use strict";

  var anchor = null; // {file, side, line}: the line of the latest plain click

  // "new": the new file's lines; "old": removed lines, by the old file's numbers.
  function rowOf(file, side, line) {
    return file.querySelector("tr[data-" + side + '-line="' + line + '"]');
  }

  function clearSelection(root) {
    (root || document).querySelectorAll("tr.is-selected").forEach(function (tr) { tr.classList.remove("is-selected"); });
  }

  function closeForm() {
    document.querySelectorAll(".line-comment-form-row").forEach(function (tr) { tr.remove(); });
    clearSelection();
  }

  function openForm(file, side, start, end) {
    var template = document.getElementById("line-comment-form-template");
    if (!template) return;
    closeForm();
    var formRow = template.content.firstElementChild.cloneNode(true);
    var form = formRow.querySelector("form");
    var path = file.getAttribute("data-path");
    form.elements.path.value = path;
    form.elements.line_start.value = start;
    form.elements.line_end.value = end;
    form.elements.side.value = side;
    formRow.querySelector("[data-line-comment-where]").textContent =
      "Comment on " + path + ", " + (side === "old" ? "removed " : "") +
      "line" + (start === end ? " " + start : "s " + start + "–" + end);
    for (var line = start; line <= end; line++) {
      var tr = rowOf(file, side, line);
      if (tr) tr.classList.add("is-selected");
    }
    var last = rowOf(file, side, end);
    // Under the last line, after the comments already there.
    var after = last;
    while (after.nextElementSibling && after.nextElementSibling.classList.contains("line-comment-row")) {
      after = after.nextElementSibling;
    }
    after.after(formRow);
    if (window.htmx) window.htmx.process(formRow);
    form.elements.body.focus();
  }

  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-line-comment-add]");
    if (button) {
      var file = button.closest(".diff-file");
      var side = button.getAttribute("data-side") === "old" ? "old" : "new";
      var line = Number(button.closest("tr").getAttribute("data-" + side + "-line"));
      if (event.shiftKey && anchor && anchor.file === file && anchor.side === side) {
        openForm(file, side, Math.min(anchor.line, line), Math.max(anchor.line, line));
      } else {
        anchor = { file: file, side: side, line: line };
        openForm(file, side, line, line);
      }
      return;
    }
    if (event.target.closest("[data-line-comment-cancel]")) {
      closeForm();
      anchor = null;
    }
  });
})();
