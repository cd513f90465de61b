// Marks every table and code block wider than the page (class `cog-scrolls`; docs/stylesheets/extra.css makes
// it a box with its scroll bars in view) and says so in a note above it, so that nothing is cut unseen (issue 39).
// Run on load and again when the window's width changes; a block that fits again loses its mark and note.
(function () {
  "use strict";
  var NOTE = "cog-scroll-note";

  function blocks() {
    return document.querySelectorAll(".md-typeset .md-typeset__scrollwrap, .md-typeset pre > code");
  }

  function mark() {
    blocks().forEach(function (el) {
      var holder = el.tagName === "CODE" ? el.parentElement : el;
      var note = holder.previousElementSibling;
      var hasNote = note !== null && note.classList.contains(NOTE);
      var wide = el.scrollWidth > el.clientWidth + 1;
      el.classList.toggle("cog-scrolls", wide);
      if (wide && !hasNote) {
        note = document.createElement("span");
        note.className = NOTE;
        note.textContent = "\u21c6 wider than the page: scroll sideways in the box below";
        holder.parentElement.insertBefore(note, holder);
      } else if (!wide && hasNote) {
        note.remove();
      }
    });
  }

  var timer = null;
  function later() {
    clearTimeout(timer);
    timer = setTimeout(mark, 100);
  }

  if (typeof document$ !== "undefined") {
    document$.subscribe(mark);  // Material's page-load stream (instant navigation included)
  } else {
    document.addEventListener("DOMContentLoaded", mark);
  }
  window.addEventListener("resize", later);
  document.addEventListener("toggle", later, true);  // a collapsed block (??? details) opened
})();
