// sweepq's dashboard: confirm before an action posts, and refresh the live parts of a page.
// Every element with data-live="URL" is replaced by the HTML fragment at URL every few
// seconds, only while the tab is visible. No other script runs on these pages.
(function () {
  "use strict";

  var PERIOD_MS = 2500;
  var timer = null;
  var lastHtml = new WeakMap();

  document.addEventListener("submit", function (event) {
    var question = event.target.getAttribute("data-confirm");
    if (question && !window.confirm(question)) {
      event.preventDefault();
    }
  });

  function refresh(element) {
    var url = element.getAttribute("data-live");
    if (element.getAttribute("data-busy") === "1") {
      return;
    }
    element.setAttribute("data-busy", "1");
    fetch(url, { credentials: "same-origin", headers: { "Accept": "text/html" } })
      .then(function (response) {
        if (response.status === 401) {
          window.location.reload();  // signed out: the page shows the login
          return null;
        }
        if (!response.ok) {
          element.classList.add("stale");  // the database is away: the last figures, dimmed
          return null;
        }
        return response.text();
      })
      .then(function (html) {
        if (typeof html === "string" && html !== lastHtml.get(element)) {
          lastHtml.set(element, html);  // unchanged figures leave the page alone
          element.innerHTML = html;
        }
        if (typeof html === "string") {
          element.setAttribute("data-refreshed", String(Date.now()));
          element.classList.remove("stale");
        }
      })
      .catch(function () {
        element.classList.add("stale");  // shown dimmed until the next refresh succeeds
      })
      .then(function () {
        element.removeAttribute("data-busy");
      });
  }

  function tick() {
    if (document.hidden) {
      return;
    }
    document.querySelectorAll("[data-live]").forEach(refresh);
  }

  function start() {
    if (timer === null && document.querySelector("[data-live]")) {
      timer = window.setInterval(tick, PERIOD_MS);
    }
  }

  function stop() {
    if (timer !== null) {
      window.clearInterval(timer);
      timer = null;
    }
  }

  document.addEventListener("visibilitychange", function () {
    if (document.hidden) {
      stop();
    } else {
      tick();
      start();
    }
  });

  if (!document.hidden) {
    start();
  }
})();
