"""The viewer's style sheet and script, served from memory (``/static/...``): no
file is read for them, nothing is fetched from elsewhere."""

from __future__ import annotations

__all__ = ["CSS", "JS"]

CSS = """
main{max-width:1400px}
header.bar{background:#1d2433;padding:8px 24px}
header.bar a.brand{color:#fff;font-weight:700;text-decoration:none;letter-spacing:.02em}
a{color:#175cd3}
h1 small{font-size:14px;font-weight:400;margin-left:6px}
.crumbs{margin:0 0 8px;color:var(--muted)}
.path{margin:-6px 0 12px;font-size:12px;overflow-wrap:anywhere}
.toolbar{display:flex;flex-wrap:wrap;gap:8px;align-items:center;margin:0 0 10px}
.toolbar input[type=search]{min-width:220px;padding:4px 8px}
.toolbar select,.toolbar input,.toolbar button{font:inherit;padding:3px 6px}
.scroll{overflow-x:auto}
table.grid{width:100%;font-size:13px}
table.grid th,table.grid td{text-align:left;vertical-align:top;white-space:nowrap}
table.grid td.n,table.grid th.n{text-align:right;font-variant-numeric:tabular-nums}
table.grid td.models,table.grid td.means{white-space:normal;min-width:150px}
table.grid td.run{white-space:normal;overflow-wrap:anywhere;min-width:160px;max-width:340px}
table.grid td.env{white-space:normal;overflow-wrap:anywhere;min-width:110px;max-width:260px}
table.grid td.models code{overflow-wrap:anywhere}
table.grid td.means span.mean,table.grid td.when{white-space:normal}
table.grid td.means .ci{white-space:nowrap}
table.grid thead th{background:#f2f4f7;position:sticky;top:0}
#runs thead th{white-space:normal}
th[data-sort]{cursor:pointer;user-select:none}
th[data-sort]:after{content:"\\00a0↕";color:#98a2b3;font-size:11px}
th[aria-sort=ascending]:after{content:"\\00a0▲";color:#1d2433}
th[aria-sort=descending]:after{content:"\\00a0▼";color:#1d2433}
tbody tr:hover{background:#f9fafb}
td.bad{color:#b42318;font-weight:600}
td.done progress{display:block;width:70px;height:6px;margin:3px 0 0 auto}
.agent{color:var(--muted);font-size:12px}.ci{color:var(--muted);font-size:12px}
.state{border-radius:10px;padding:1px 8px;font-size:12px;font-weight:600}
.state-running{background:#d1e9ff;color:#175cd3}
.state-finished{background:#dcfae6;color:#067647}
.state-interrupted{background:#fef0c7;color:#b54708}
section{margin-top:6px}
.means-line{margin:8px 0}
ol.newest{margin:0;padding-left:22px;font-size:13px}ol.newest li{margin:2px 0}
#newest-box,#failures{background:var(--card);border:1px solid var(--line);border-radius:8px;
padding:4px 14px 10px;margin-top:14px}
#newest-box h2,#failures h2{margin-top:8px}
#episode-filter label{color:var(--muted)}
svg.diffbar{width:160px;height:20px;display:block}
table.compare thead th{white-space:normal;vertical-align:bottom}
#compare-hint{font-size:12px}
span.mean{display:block;white-space:nowrap}
@media (max-width:900px){main{padding:12px}.plots{grid-template-columns:1fr}
.toolbar input[type=search]{min-width:0;flex:1 1 160px}
#runs thead{display:none}
#runs,#runs tbody,#runs td{display:block;width:auto}
#runs{border:0;background:none}
#runs tr{display:grid;grid-template-columns:repeat(4,1fr);gap:4px 12px;background:var(--card);
border:1px solid var(--line);border-radius:8px;margin:0 0 10px;padding:8px 12px}
#runs td{border:0;padding:0;text-align:left;white-space:normal;min-width:0;max-width:none}
#runs td:before{content:attr(data-label);display:block;color:var(--muted);font-size:11px;
text-transform:uppercase}
#runs tr{position:relative;padding-left:40px}
#runs td.pick{position:absolute;left:12px;top:10px}#runs td.pick:before{content:none}
#runs td.run{grid-column:1/-1;order:-1;font-size:15px}#runs td.run:before{content:none}
#runs td.models,#runs td.means{grid-column:span 2}
td.done progress{margin:3px 0 0}
svg.diffbar{width:90px}table.compare th,table.compare td{padding:4px 6px}}
"""

JS = r"""
(function () {
  "use strict";
  var page = document.body.dataset.page;

  function parseRow(html) {
    var t = document.createElement("template");
    t.innerHTML = html.trim();
    return t.content.firstElementChild;
  }

  function runsPage() {
    var table = document.getElementById("runs");
    var body = table.tBodies[0];
    var text = document.getElementById("runs-filter");
    var state = document.getElementById("state-filter");
    var button = document.getElementById("compare-button");
    var sortBy = null, sortDir = 1;

    function filter() {
      var q = text.value.toLowerCase(), s = state.value;
      Array.prototype.forEach.call(body.rows, function (r) {
        r.hidden = !((!q || r.dataset.search.indexOf(q) >= 0) && (!s || r.dataset.state === s));
      });
    }
    function picked() { return table.querySelectorAll("input[name=run]:checked").length; }
    function enable() { button.disabled = picked() < 2; }
    function key(row, i, numeric) {
      var v = row.cells[i].dataset.value || "";
      return numeric ? (v === "" ? -Infinity : parseFloat(v)) : v.toLowerCase();
    }
    function sort() {
      if (sortBy === null) return;
      var i = sortBy.cellIndex, numeric = sortBy.dataset.sort === "num";
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = key(a, i, numeric), y = key(b, i, numeric);
        return (x < y ? -1 : x > y ? 1 : 0) * sortDir;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    }
    table.querySelectorAll("th[data-sort]").forEach(function (th) {
      function go() {
        sortDir = sortBy === th ? -sortDir : 1;
        if (sortBy && sortBy !== th) sortBy.removeAttribute("aria-sort");
        sortBy = th;
        th.setAttribute("aria-sort", sortDir > 0 ? "ascending" : "descending");
        sort();
      }
      th.addEventListener("click", go);
      th.addEventListener("keydown", function (e) { if (e.key === "Enter") go(); });
    });
    text.addEventListener("input", filter);
    state.addEventListener("change", filter);
    table.addEventListener("change", enable);
    enable();

    var source = new EventSource("/api/events");
    source.addEventListener("rows", function (event) {
      var rows = JSON.parse(event.data);
      var seen = {};
      rows.forEach(function (item) {
        seen[item.id] = true;
        var fresh = parseRow(item.html);
        var old = body.querySelector('tr[data-run="' + CSS.escape(item.id) + '"]');
        if (old) {
          // cells that changed are swapped; the row, its checkbox and focus stay put
          Array.prototype.slice.call(fresh.cells).forEach(function (cell, i) {
            var was = old.cells[i];
            if (i > 0 && was.outerHTML !== cell.outerHTML) old.replaceChild(cell, was);
          });
          old.dataset.state = fresh.dataset.state;
          old.dataset.search = fresh.dataset.search;
        } else {
          body.insertBefore(fresh, body.firstChild);
        }
      });
      Array.prototype.slice.call(body.rows).forEach(function (r) {
        if (!seen[r.dataset.run]) body.removeChild(r);
      });
      document.getElementById("run-count").textContent = rows.length;
      var none = document.getElementById("no-runs");
      if (none && rows.length) none.hidden = true;
      filter(); sort(); enable();
    });
  }

  function runPage() {
    var run = document.body.dataset.run;
    var api = "/api/runs/" + encodeURIComponent(run), base = "/run/" + encodeURIComponent(run);
    var figures = document.getElementById("figures");
    var lastFigures = 0, pending = false;
    function isFinal() {
      var box = figures.firstElementChild;
      return box && box.dataset.final === "1";
    }
    function refreshFigures(force) {
      var now = Date.now();
      if (pending || (!force && now - lastFigures < 5000)) return;
      pending = true; lastFigures = now;
      fetch(base + "/figures").then(function (r) { return r.ok ? r.text() : null; })
        .then(function (html) { if (html !== null) figures.innerHTML = html; })
        .finally(function () {
          pending = false;
          // not final yet (still read, or the env's own figures still drawn): again soon
          if (!isFinal()) setTimeout(function () { refreshFigures(false); }, 5000);
        });
    }
    if (!isFinal()) refreshFigures(true);
    var source = new EventSource(api + "/events");
    source.addEventListener("live", function (event) {
      var data = JSON.parse(event.data);
      document.getElementById("live-facts").innerHTML = data.facts;
      document.getElementById("newest").innerHTML = data.newest;
      document.body.dataset.state = data.state;
      if (data.changed) refreshFigures(true);
      else if (!isFinal()) refreshFigures(false);
    });
  }

  if (page === "runs") runsPage();
  if (page === "run") runPage();
})();
"""
