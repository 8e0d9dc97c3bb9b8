// herald console: shows times in the browser's zone (UTC stays on hover)
// and refreshes the overview without reloading the page. Every page works
// without this script; it adds no content of its own.
(function () {
  "use strict";

  var fmt = new Intl.DateTimeFormat(undefined, {
    year: "numeric", month: "2-digit", day: "2-digit",
    hour: "2-digit", minute: "2-digit", second: "2-digit", timeZoneName: "short"
  });

  function localTimes(root) {
    var ts = root.querySelectorAll("time[datetime]");
    for (var i = 0; i < ts.length; i++) {
      var d = new Date(ts[i].getAttribute("datetime"));
      if (!isNaN(d.getTime())) {
        ts[i].textContent = fmt.format(d);
      }
    }
  }

  function refresh(section) {
    var every = parseInt(section.getAttribute("data-refresh"), 10);
    var src = section.getAttribute("data-src");
    if (!(every > 0) || !src) {
      return;
    }
    var busy = false;
    window.setInterval(function () {
      if (busy || document.hidden) {
        return;
      }
      busy = true;
      fetch(src, { credentials: "same-origin", headers: { "X-Herald-Console": "refresh" } })
        .then(function (res) {
          if (res.status === 401) {
            // The session expired: the login form says so.
            window.location.assign(res.headers.get("X-Herald-Login") || "/ui/login?reason=expired");
            return null;
          }
          if (!res.ok) {
            section.setAttribute("data-stale", "true");
            return null;
          }
          return res.text();
        })
        .then(function (html) {
          if (html !== null && html !== undefined) {
            // The fragment is the server's html/template output: escaped.
            section.innerHTML = html;
            section.removeAttribute("data-stale");
            localTimes(section);
          }
        })
        .catch(function () { section.setAttribute("data-stale", "true"); })
        .then(function () { busy = false; });
    }, every);
  }

  function selectAll() {
    var all = document.getElementById("all");
    if (!all) {
      return;
    }
    all.addEventListener("change", function () {
      var boxes = document.querySelectorAll("#deadletters input[name=id]");
      for (var i = 0; i < boxes.length; i++) {
        boxes[i].checked = all.checked;
        boxes[i].disabled = all.checked;
      }
    });
  }

  document.addEventListener("DOMContentLoaded", function () {
    localTimes(document);
    var ov = document.getElementById("overview");
    if (ov) {
      refresh(ov);
    }
    selectAll();
    document.documentElement.setAttribute("data-js", "ready");
  });
})();
